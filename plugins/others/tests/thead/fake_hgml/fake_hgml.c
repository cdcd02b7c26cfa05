/* A fake of T-Head's HGML (libhgml.so): NVML's C API under hgml names.
 *
 * PPUs come from the table named by FAKE_HGML_TABLE (see fake_table.h). Keys:
 *   global: init=<hgmlReturn_t of hgmlInit_v2> driver=<version>
 *   device: uuid= name= mem_total= mem_used= (bytes) bus_id= minor= (-1 = unsupported)
 *           ecc_ue=<uncorrected volatile ECC errors> util= temp= power_mw=
 * A device handle is its index plus one, never dereferenced by the caller.
 * Compile with -DFAKE_OMIT_ECC to leave hgmlDeviceGetTotalEccErrors out, or with
 * -DFAKE_OMIT_NAME to leave a required call out.
 */
#include <stdint.h>
#include "fake_table.h"

#define TABLE "FAKE_HGML_TABLE"
#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3

typedef struct { unsigned long long total, free, used; } hgmlMemory_t;
typedef struct { unsigned int gpu, memory; } hgmlUtilization_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} hgmlPciInfo_t;

static int shutdown_calls;
int fake_hgml_shutdown_calls(void) { return shutdown_calls; }

static const fake_row *dev(void *handle) {
    fake_load(TABLE);
    return fake_device((long long)(uintptr_t)handle - 1);
}

int hgmlInit_v2(void) { fake_load(TABLE); return (int)fake_int(&fake_global_row, "init", SUCCESS); }
int hgmlShutdown(void) { shutdown_calls++; return SUCCESS; }

int hgmlSystemGetDriverVersion(char *buf, unsigned int len) {
    fake_load(TABLE);
    fake_copy(buf, len, fake_str(&fake_global_row, "driver", "1.4.0"));
    return SUCCESS;
}

int hgmlDeviceGetCount_v2(unsigned int *n) {
    if (!n) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *n = (unsigned int)fake_device_count;
    return SUCCESS;
}

int hgmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle) {
    fake_load(TABLE);
    if (!handle || !fake_device(index)) return INVALID_ARGUMENT;
    *handle = (void *)(uintptr_t)(index + 1);
    return SUCCESS;
}

int hgmlDeviceGetUUID(void *h, char *buf, unsigned int len) {
    const fake_row *d = dev(h);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "uuid", "PPU-unknown"));
    return SUCCESS;
}

#ifndef FAKE_OMIT_NAME
int hgmlDeviceGetName(void *h, char *buf, unsigned int len) {
    const fake_row *d = dev(h);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "name", "PPU-ZW810E"));
    return SUCCESS;
}
#endif

int hgmlDeviceGetMemoryInfo(void *h, hgmlMemory_t *m) {
    const fake_row *d = dev(h);
    if (!d || !m) return INVALID_ARGUMENT;
    m->total = (unsigned long long)fake_int(d, "mem_total", 0);
    m->used = (unsigned long long)fake_int(d, "mem_used", 0);
    m->free = m->total - m->used;
    return SUCCESS;
}

int hgmlDeviceGetPciInfo_v3(void *h, hgmlPciInfo_t *p) {
    const fake_row *d = dev(h);
    if (!d || !p) return INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    fake_copy(p->busId, sizeof p->busId, fake_str(d, "bus_id", "00000000:00:00.0"));
    return SUCCESS;
}

int hgmlDeviceGetMinorNumber(void *h, unsigned int *minor) {
    const fake_row *d = dev(h);
    if (!d || !minor) return INVALID_ARGUMENT;
    long long v = fake_int(d, "minor", -1);
    if (v < 0) return NOT_SUPPORTED;
    *minor = (unsigned int)v;
    return SUCCESS;
}

int hgmlDeviceGetUtilizationRates(void *h, hgmlUtilization_t *u) {
    const fake_row *d = dev(h);
    if (!d || !u) return INVALID_ARGUMENT;
    u->gpu = (unsigned int)fake_int(d, "util", 0);
    u->memory = 0;
    return SUCCESS;
}

int hgmlDeviceGetTemperature(void *h, unsigned int sensor, unsigned int *t) {
    const fake_row *d = dev(h);
    if (!d || !t || sensor != 0) return INVALID_ARGUMENT;
    *t = (unsigned int)fake_int(d, "temp", 0);
    return SUCCESS;
}

int hgmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
    const fake_row *d = dev(h);
    if (!d || !mw) return INVALID_ARGUMENT;
    long long v = fake_int(d, "power_mw", -1);
    if (v < 0) return NOT_SUPPORTED;
    *mw = (unsigned int)v;
    return SUCCESS;
}

#ifndef FAKE_OMIT_ECC
int hgmlDeviceGetTotalEccErrors(void *h, unsigned int type, unsigned int counter,
                                unsigned long long *count) {
    const fake_row *d = dev(h);
    if (!d || !count || type != 1 || counter != 0) return INVALID_ARGUMENT;
    *count = (unsigned long long)fake_int(d, "ecc_ue", 0);
    return SUCCESS;
}
#endif
