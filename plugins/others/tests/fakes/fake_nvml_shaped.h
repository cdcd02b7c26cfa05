/* The NVML-shaped calls of a fake management library whose C API is NVML's under some prefix
 * (Iluvatar's IXML keeps nvml*, T-Head's HGML renames them hgml*), for fake_ixml.c and
 * fake_hgml.c.
 *
 * Before including, define:
 *   FAKE_API(name)   the exported name of NVML's call `name`, e.g. nvml##name or hgml##name
 *   TABLE            the variable naming the device table (see fake_table.h)
 *   FAKE_DRIVER, FAKE_UUID, FAKE_NAME   defaults of the driver version, a UUID and a name
 * Keys read:
 *   global: init=<return of Init_v2> driver=<version>
 *   device: uuid= name= mem_total= mem_used= (bytes) bus_id= minor= (-1 = unsupported)
 *           util= temp= power_mw= (-1 = unsupported)
 * A device handle is its index plus one, never dereferenced by the caller. fake_dev(handle)
 * gives its row to the vendor's own calls. -DFAKE_OMIT_NAME leaves a required call out.
 */
#include <stdint.h>
#include "fake_table.h"

#define SUCCESS 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3

typedef struct { unsigned long long total, free, used; } fake_memory_t;
typedef struct { unsigned int gpu, memory; } fake_utilization_t;
typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} fake_pci_info_t;

static const fake_row *fake_dev(void *handle) {
    fake_load(TABLE);
    return fake_device((long long)(uintptr_t)handle - 1);
}

int FAKE_API(Init_v2)(void) {
    fake_load(TABLE);
    return (int)fake_int(&fake_global_row, "init", SUCCESS);
}
int FAKE_API(Shutdown)(void) { return SUCCESS; }

int FAKE_API(SystemGetDriverVersion)(char *buf, unsigned int len) {
    fake_load(TABLE);
    fake_copy(buf, len, fake_str(&fake_global_row, "driver", FAKE_DRIVER));
    return SUCCESS;
}

int FAKE_API(DeviceGetCount_v2)(unsigned int *n) {
    if (!n) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *n = (unsigned int)fake_device_count;
    return SUCCESS;
}

int FAKE_API(DeviceGetHandleByIndex_v2)(unsigned int index, void **handle) {
    fake_load(TABLE);
    if (!handle || !fake_device(index)) return INVALID_ARGUMENT;
    *handle = (void *)(uintptr_t)(index + 1);
    return SUCCESS;
}

int FAKE_API(DeviceGetUUID)(void *h, char *buf, unsigned int len) {
    const fake_row *d = fake_dev(h);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "uuid", FAKE_UUID));
    return SUCCESS;
}

#ifndef FAKE_OMIT_NAME
int FAKE_API(DeviceGetName)(void *h, char *buf, unsigned int len) {
    const fake_row *d = fake_dev(h);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "name", FAKE_NAME));
    return SUCCESS;
}
#endif

int FAKE_API(DeviceGetMemoryInfo)(void *h, fake_memory_t *m) {
    const fake_row *d = fake_dev(h);
    if (!d || !m) return INVALID_ARGUMENT;
    m->total = (unsigned long long)fake_int(d, "mem_total", 0);
    m->used = (unsigned long long)fake_int(d, "mem_used", 0);
    m->free = m->total - m->used;
    return SUCCESS;
}

int FAKE_API(DeviceGetPciInfo_v3)(void *h, fake_pci_info_t *p) {
    const fake_row *d = fake_dev(h);
    if (!d || !p) return INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    fake_copy(p->busId, sizeof p->busId, fake_str(d, "bus_id", "00000000:00:00.0"));
    return SUCCESS;
}

int FAKE_API(DeviceGetMinorNumber)(void *h, unsigned int *minor) {
    const fake_row *d = fake_dev(h);
    if (!d || !minor) return INVALID_ARGUMENT;
    long long v = fake_int(d, "minor", -1);
    if (v < 0) return NOT_SUPPORTED;
    *minor = (unsigned int)v;
    return SUCCESS;
}

int FAKE_API(DeviceGetUtilizationRates)(void *h, fake_utilization_t *u) {
    const fake_row *d = fake_dev(h);
    if (!d || !u) return INVALID_ARGUMENT;
    u->gpu = (unsigned int)fake_int(d, "util", 0);
    u->memory = 0;
    return SUCCESS;
}

int FAKE_API(DeviceGetTemperature)(void *h, unsigned int sensor, unsigned int *t) {
    const fake_row *d = fake_dev(h);
    if (!d || !t || sensor != 0) return INVALID_ARGUMENT;
    *t = (unsigned int)fake_int(d, "temp", 0);
    return SUCCESS;
}

int FAKE_API(DeviceGetPowerUsage)(void *h, unsigned int *mw) {
    const fake_row *d = fake_dev(h);
    if (!d || !mw) return INVALID_ARGUMENT;
    long long v = fake_int(d, "power_mw", -1);
    if (v < 0) return NOT_SUPPORTED;
    *mw = (unsigned int)v;
    return SUCCESS;
}
