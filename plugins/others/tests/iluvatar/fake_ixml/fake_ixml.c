/* A fake of Iluvatar's IXML (libixml.so): NVML's C API names plus ixmlDeviceGetHealth.
 *
 * Devices come from the table named by FAKE_IXML_TABLE (see fake_table.h). Keys:
 *   global: init=<nvmlReturn_t of nvmlInit_v2> driver=<version>
 *   device: uuid= name= mem_total= mem_used= (bytes) bus_id= minor= (-1 = unsupported)
 *           health= (bit mask, 0 = OK) util= temp= power_mw=
 * A device handle is its index plus one, never dereferenced by the caller.
 * Compile with -DFAKE_OMIT_HEALTH to leave ixmlDeviceGetHealth out (an older IXML).
 */
#include <stdint.h>
#include "fake_table.h"

#define TABLE "FAKE_IXML_TABLE"
#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

static int shutdown_calls;
int fake_ixml_shutdown_calls(void) { return shutdown_calls; }

static const fake_row *dev(void *handle) {
    fake_load(TABLE);
    return fake_device((long long)(uintptr_t)handle - 1);
}

int nvmlInit_v2(void) { fake_load(TABLE); return (int)fake_int(&fake_global_row, "init", SUCCESS); }
int nvmlShutdown(void) { shutdown_calls++; return SUCCESS; }

int nvmlSystemGetDriverVersion(char *buf, unsigned int len) {
    fake_load(TABLE);
    fake_copy(buf, len, fake_str(&fake_global_row, "driver", "4.1.0"));
    return SUCCESS;
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
    if (!n) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *n = (unsigned int)fake_device_count;
    return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    fake_load(TABLE);
    if (!handle || !fake_device(index)) return INVALID_ARGUMENT;
    *handle = (void *)(uintptr_t)(index + 1);
    return SUCCESS;
}

int nvmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
    const fake_row *d = dev(h);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "uuid", "GPU-unknown"));
    return SUCCESS;
}

int nvmlDeviceGetName(void *h, char *buf, unsigned int len) {
    const fake_row *d = dev(h);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "name", "Iluvatar BI-V150"));
    return SUCCESS;
}

int nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    const fake_row *d = dev(h);
    if (!d || !m) return INVALID_ARGUMENT;
    m->total = (unsigned long long)fake_int(d, "mem_total", 0);
    m->used = (unsigned long long)fake_int(d, "mem_used", 0);
    m->free = m->total - m->used;
    return SUCCESS;
}

int nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *p) {
    const fake_row *d = dev(h);
    if (!d || !p) return INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    fake_copy(p->busId, sizeof p->busId, fake_str(d, "bus_id", "00000000:00:00.0"));
    return SUCCESS;
}

int nvmlDeviceGetMinorNumber(void *h, unsigned int *minor) {
    const fake_row *d = dev(h);
    if (!d || !minor) return INVALID_ARGUMENT;
    long long v = fake_int(d, "minor", -1);
    if (v < 0) return NOT_SUPPORTED;
    *minor = (unsigned int)v;
    return SUCCESS;
}

int nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
    const fake_row *d = dev(h);
    if (!d || !u) return INVALID_ARGUMENT;
    u->gpu = (unsigned int)fake_int(d, "util", 0);
    u->memory = 0;
    return SUCCESS;
}

int nvmlDeviceGetTemperature(void *h, unsigned int sensor, unsigned int *t) {
    const fake_row *d = dev(h);
    if (!d || !t || sensor != 0) return INVALID_ARGUMENT;
    *t = (unsigned int)fake_int(d, "temp", 0);
    return SUCCESS;
}

int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    const fake_row *d = dev(h);
    if (!d || !mw) return INVALID_ARGUMENT;
    long long v = fake_int(d, "power_mw", -1);
    if (v < 0) return NOT_SUPPORTED;
    *mw = (unsigned int)v;
    return SUCCESS;
}

#ifndef FAKE_OMIT_HEALTH
int ixmlDeviceGetHealth(void *h, unsigned long long *health) {
    const fake_row *d = dev(h);
    if (!d || !health) return INVALID_ARGUMENT;
    *health = (unsigned long long)fake_int(d, "health", 0);
    return SUCCESS;
}
#endif
