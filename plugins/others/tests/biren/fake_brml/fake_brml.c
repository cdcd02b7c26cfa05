/* A fake of Biren's BRML (libbiren-ml.so): brml.h's device queries plus the SVI calls.
 *
 * GPUs come from the table named by FAKE_BRML_TABLE (see fake_table.h). Keys:
 *   global: init=<brmlReturn_t of brmlInit> driver=<version>
 *   device: uuid= name= mem_total= mem_used= (bytes) bus_id= node_id= health= util= temp=
 *           power_mw= svi=<0,1,2,4: instances the GPU is split into> inst_mem=<bytes each>
 * A GPU handle is its index plus one; SVI instance j of GPU i is (i + 1) * 100 + j + 1, and
 * its node id is the GPU's node_id plus j.
 * Compile with -DFAKE_OMIT_SVI to leave the SVI calls out (brml.h's API version 1), or
 * with -DFAKE_OMIT_HEALTH to leave a required call out.
 */
#include <stdint.h>
#include "fake_table.h"

#define TABLE "FAKE_BRML_TABLE"
#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define NOT_FOUND 5

typedef struct { unsigned long long total, free, used; } brmlMemory_t;
typedef struct { unsigned int gpu, memory; } brmlUtilization_t;
typedef struct {
    unsigned int domain, bus, device, function, pciDeviceId, pciSubSystemId;
    char busId[32];
} brmlPciInfo_t;
typedef struct { char name[96], id[96], serial[96], board_id[96]; } brmlGPUInfo_t;

static int shutdown_calls;
int fake_brml_shutdown_calls(void) { return shutdown_calls; }

/* The GPU row of a GPU or instance handle; *instance is -1 for a GPU. */
static const fake_row *dev(void *handle, int *instance) {
    long long h = (long long)(uintptr_t)handle;
    fake_load(TABLE);
    *instance = -1;
    if (h >= 100) {
        *instance = (int)(h % 100) - 1;
        h = h / 100;
    }
    return fake_device(h - 1);
}

int brmlInit(void) { fake_load(TABLE); return (int)fake_int(&fake_global_row, "init", SUCCESS); }
int brmlShutdown(void) { shutdown_calls++; return SUCCESS; }

int brmlSystemGetDriverVersion(char *buf, unsigned int len) {
    fake_load(TABLE);
    fake_copy(buf, len, fake_str(&fake_global_row, "driver", "1.5.0"));
    return SUCCESS;
}

int brmlDeviceGetCount(unsigned int *n) {
    if (!n) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *n = (unsigned int)fake_device_count;
    return SUCCESS;
}

int brmlDeviceGetHandleByIndex(unsigned int index, void **handle) {
    fake_load(TABLE);
    if (!handle || !fake_device(index)) return NOT_FOUND;
    *handle = (void *)(uintptr_t)(index + 1);
    return SUCCESS;
}

int brmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "uuid", "BR-unknown"));
    return SUCCESS;
}

int brmlDeviceGetGpuInfo(void *h, brmlGPUInfo_t *info) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !info) return INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    fake_copy(info->name, sizeof info->name, fake_str(d, "name", "BR104"));
    return SUCCESS;
}

int brmlDeviceGetMemoryInfo(void *h, brmlMemory_t *m) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !m) return INVALID_ARGUMENT;
    m->total = (unsigned long long)fake_int(d, inst < 0 ? "mem_total" : "inst_mem", 0);
    m->used = (unsigned long long)fake_int(d, "mem_used", 0);
    m->free = m->total - m->used;
    return SUCCESS;
}

int brmlDeviceGetPciInfo(void *h, brmlPciInfo_t *p) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !p) return INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    fake_copy(p->busId, sizeof p->busId, fake_str(d, "bus_id", "00000000:00:00.0"));
    return SUCCESS;
}

int brmlDeviceGetNodeId(void *h, unsigned int *id) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !id) return INVALID_ARGUMENT;
    *id = (unsigned int)(fake_int(d, "node_id", 0) + (inst < 0 ? 0 : inst));
    return SUCCESS;
}

#ifndef FAKE_OMIT_HEALTH
int brmlDeviceGetHealthStatus(void *h, unsigned int *status) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !status) return INVALID_ARGUMENT;
    *status = (unsigned int)fake_int(d, "health", 0);
    return SUCCESS;
}
#endif

int brmlDeviceGetUtilizationRates(void *h, brmlUtilization_t *u) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !u) return INVALID_ARGUMENT;
    u->gpu = (unsigned int)fake_int(d, "util", 0);
    u->memory = 0;
    return SUCCESS;
}

int brmlDeviceGetTemperature(void *h, unsigned int sensor, unsigned int *t) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !t || sensor != 0) return INVALID_ARGUMENT;
    *t = (unsigned int)fake_int(d, "temp", 0);
    return SUCCESS;
}

int brmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !mw) return INVALID_ARGUMENT;
    long long v = fake_int(d, "power_mw", -1);
    if (v < 0) return NOT_SUPPORTED;
    *mw = (unsigned int)v;
    return SUCCESS;
}

#ifndef FAKE_OMIT_SVI
int brmlDeviceGetSviMode(void *h, unsigned int *current, unsigned int *pending) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !current || !pending) return INVALID_ARGUMENT;
    *current = *pending = (unsigned int)fake_int(d, "svi", 0);
    return SUCCESS;
}

int brmlDeviceGetGpuInstanceById(void *h, unsigned int id, void **instance) {
    int inst;
    const fake_row *d = dev(h, &inst);
    if (!d || !instance || inst >= 0) return INVALID_ARGUMENT;
    if ((long long)id >= fake_int(d, "svi", 0)) return NOT_FOUND;
    *instance = (void *)(uintptr_t)((uintptr_t)h * 100 + id + 1);
    return SUCCESS;
}
#endif
