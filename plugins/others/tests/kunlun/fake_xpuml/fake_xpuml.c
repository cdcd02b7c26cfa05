/* A fake of Kunlunxin's XPUML (libxpuml.so): the xpuml* calls the plugin makes.
 *
 * Devices come from the table named by FAKE_XPUML_TABLE (see fake_table.h). Keys:
 *   global: init=<return code of xpumlInit>
 *   device: name= serial= minor= bus_id= mem_total= mem_used= (bytes) state= (xpumlDeviceState_t)
 *           util= temp= (degrees C) power_mw= (-1 = not supported, for util/temp/power/state)
 *           state_rc= (the return code of xpumlDeviceGetState, e.g. 15 for a lost XPU)
 * A handle is the device's index plus one, so a zero handle is never valid.
 */
#include "fake_table.h"

#define TABLE "FAKE_XPUML_TABLE"
#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define NOT_FOUND 6

typedef struct {
    unsigned int domain, bus, device, function, pciDeviceId, pciSubSystemId;
    char busId[32];
    unsigned long long reserved[9];
} xpumlPciInfo_t;
typedef struct {
    unsigned long long pageSizeGlobalMemory, totalGlobalMemory, freeGlobalMemory, usedGlobalMemory;
    unsigned long long pageSizeL3Memory, totalL3Memory, freeL3Memory, usedL3Memory;
    unsigned long long reserved[8];
} xpumlMemory_t;
typedef struct { unsigned int xpu, memory; unsigned long long reserved[15]; } xpumlUtilization_t;


static const fake_row *dev(void *handle) {
    fake_load(TABLE);
    return fake_device((long long)(size_t)handle - 1);
}

int xpumlInit(void) { fake_load(TABLE); return (int)fake_int(&fake_global_row, "init", 0); }
int xpumlShutdown(void) { return SUCCESS; }

int xpumlDeviceGetCount(unsigned int *count) {
    if (!count) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *count = (unsigned)fake_device_count;
    return SUCCESS;
}

int xpumlDeviceGetHandleByIndex(unsigned int i, void **handle) {
    fake_load(TABLE);
    if (!handle) return INVALID_ARGUMENT;
    if (!fake_device(i)) return NOT_FOUND;
    *handle = (void *)(size_t)(i + 1);
    return SUCCESS;
}

static int text(void *h, const char *key, const char *dflt, char *out, unsigned int len) {
    const fake_row *d = dev(h);
    if (!d || !out) return INVALID_ARGUMENT;
    fake_copy(out, len, fake_str(d, key, dflt));
    return SUCCESS;
}

int xpumlDeviceGetName(void *h, char *name, unsigned int len) { return text(h, "name", "P800", name, len); }
int xpumlDeviceGetSerial(void *h, char *s, unsigned int len) { return text(h, "serial", "", s, len); }

int xpumlDeviceGetMinorNumber(void *h, unsigned int *minor) {
    const fake_row *d = dev(h);
    if (!d || !minor) return INVALID_ARGUMENT;
    *minor = (unsigned)fake_int(d, "minor", (long long)(size_t)h - 1);
    return SUCCESS;
}

int xpumlDeviceGetPciInfo(void *h, xpumlPciInfo_t *pci) {
    const fake_row *d = dev(h);
    if (!d || !pci) return INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    fake_copy(pci->busId, sizeof pci->busId, fake_str(d, "bus_id", "00000000:00:00.0"));
    return SUCCESS;
}

int xpumlDeviceGetMemoryInfo(void *h, xpumlMemory_t *m) {
    const fake_row *d = dev(h);
    if (!d || !m) return INVALID_ARGUMENT;
    memset(m, 0, sizeof *m);
    m->totalGlobalMemory = (unsigned long long)fake_int(d, "mem_total", 0);
    m->usedGlobalMemory = (unsigned long long)fake_int(d, "mem_used", 0);
    m->freeGlobalMemory = m->totalGlobalMemory - m->usedGlobalMemory;
    return SUCCESS;
}

static int reading(void *h, const char *key, long long dflt, long long *out) {
    const fake_row *d = dev(h);
    if (!d) return INVALID_ARGUMENT;
    *out = fake_int(d, key, dflt);
    return *out < 0 ? NOT_SUPPORTED : SUCCESS;
}

int xpumlDeviceGetState(void *h, int *state) {
    long long v;
    const fake_row *d = dev(h);
    if (d && fake_int(d, "state_rc", 0)) return (int)fake_int(d, "state_rc", 0);
    int rc = reading(h, "state", 201, &v);
    if (rc == SUCCESS && state) *state = (int)v;
    return state ? rc : INVALID_ARGUMENT;
}

int xpumlDeviceGetUtilizationRates(void *h, xpumlUtilization_t *u) {
    long long v;
    int rc = reading(h, "util", 0, &v);
    if (rc == SUCCESS && u) { memset(u, 0, sizeof *u); u->xpu = (unsigned)v; }
    return u ? rc : INVALID_ARGUMENT;
}

int xpumlDeviceGetTemperature(void *h, int sensor, unsigned int *t) {
    long long v;
    if (sensor != 0 || !t) return INVALID_ARGUMENT;
    int rc = reading(h, "temp", 40, &v);
    if (rc == SUCCESS) *t = (unsigned)v;
    return rc;
}

int xpumlDeviceGetPowerUsage(void *h, unsigned int *p) {
    long long v;
    if (!p) return INVALID_ARGUMENT;
    int rc = reading(h, "power_mw", 0, &v);
    if (rc == SUCCESS) *p = (unsigned)v;
    return rc;
}
