/* A fake of Moore Threads' libmtml: the C functions the real pymtml binding resolves for the
 * plugin's calls (xpushare_others.mthreads.library.SYMBOLS), with MTML's signatures.
 *
 * Devices come from the table named by FAKE_MTML_TABLE (see fake_table.h). Keys:
 *   global: init=<MtmlReturn of mtmlLibraryInit> driver=<version>
 *   device: uuid= name= sbdf= virt_role= (2 = guest virtual device) mem_total= mem_used=
 *           (bytes) ecc_ue= (-1 = unsupported) cores= util= temp= power_mw=
 * Handles are small non-null integers: device index + 1, memory + 0x100, GPU + 0x200.
 * Compile with -DFAKE_OMIT_ECC to leave mtmlMemoryGetEccErrorCounter out.
 */
#include <stdint.h>
#include "fake_table.h"

#define TABLE "FAKE_MTML_TABLE"
#define SUCCESS 0
#define INVALID_ARGUMENT 3
#define NOT_SUPPORTED 4

typedef struct {
    char sbdf[32];
    unsigned int segment, bus, device, pciDeviceId, pciSubsystemId, busWidth;
    float pciMaxSpeed, pciCurSpeed;
    unsigned int pciMaxWidth, pciCurWidth, pciMaxGen, pciCurGen;
    int rsvd[6];
} MtmlPciInfo;

typedef struct {
    unsigned int virtCap : 1, virtRole : 3, mpcCap : 1, mpcType : 3, mtLinkCap : 1, rsvd : 23;
    unsigned int rsvd2;
} MtmlDeviceProperty;

static int live_libraries, live_devices;
int fake_mtml_live_libraries(void) { return live_libraries; }
int fake_mtml_live_devices(void) { return live_devices; }

static const fake_row *row(void *handle, uintptr_t base) {
    fake_load(TABLE);
    return fake_device((long long)((uintptr_t)handle - base) - 1);
}

int mtmlLibraryInit(void **lib) {
    fake_load(TABLE);
    int code = (int)fake_int(&fake_global_row, "init", SUCCESS);
    if (code != SUCCESS) return code;
    *lib = (void *)(uintptr_t)0x1000;
    live_libraries++;
    return SUCCESS;
}
int mtmlLibraryShutDown(void *lib) { (void)lib; live_libraries--; return SUCCESS; }
const char *mtmlErrorString(int code) { return code ? "fake MTML error" : "success"; }

int mtmlLibraryCountDevice(void *lib, unsigned int *n) {
    if (!lib || !n) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *n = (unsigned int)fake_device_count;
    return SUCCESS;
}

int mtmlLibraryInitDeviceByIndex(void *lib, unsigned int i, void **dev) {
    fake_load(TABLE);
    if (!lib || !dev || !fake_device(i)) return INVALID_ARGUMENT;
    *dev = (void *)(uintptr_t)(i + 1);
    live_devices++;
    return SUCCESS;
}
int mtmlLibraryFreeDevice(void *dev) { (void)dev; live_devices--; return SUCCESS; }

int mtmlLibraryInitSystem(void *lib, void **sys) { (void)lib; *sys = (void *)(uintptr_t)0x2000; return SUCCESS; }
int mtmlLibraryFreeSystem(void *sys) { (void)sys; return SUCCESS; }
int mtmlSystemGetDriverVersion(void *sys, char *buf, unsigned int len) {
    (void)sys;
    fake_load(TABLE);
    fake_copy(buf, len, fake_str(&fake_global_row, "driver", "2.7.0"));
    return SUCCESS;
}

int mtmlDeviceGetProperty(void *dev, MtmlDeviceProperty *p) {
    const fake_row *d = row(dev, 0);
    if (!d || !p) return INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    p->virtRole = (unsigned)fake_int(d, "virt_role", 0);
    return SUCCESS;
}

int mtmlDeviceGetUUID(void *dev, char *buf, unsigned int len) {
    const fake_row *d = row(dev, 0);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "uuid", "GPU-mt"));
    return SUCCESS;
}

int mtmlDeviceGetName(void *dev, char *buf, unsigned int len) {
    const fake_row *d = row(dev, 0);
    if (!d || !buf) return INVALID_ARGUMENT;
    fake_copy(buf, len, fake_str(d, "name", "MTT S4000"));
    return SUCCESS;
}

int mtmlDeviceGetPciInfo(void *dev, MtmlPciInfo *p) {
    const fake_row *d = row(dev, 0);
    if (!d || !p) return INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    fake_copy(p->sbdf, sizeof p->sbdf, fake_str(d, "sbdf", "0000:00:00.0"));
    return SUCCESS;
}

int mtmlDeviceCountGpuCores(void *dev, unsigned int *n) {
    const fake_row *d = row(dev, 0);
    if (!d || !n) return INVALID_ARGUMENT;
    *n = (unsigned int)fake_int(d, "cores", 0);
    return SUCCESS;
}

int mtmlDeviceGetPowerUsage(void *dev, unsigned int *mw) {
    const fake_row *d = row(dev, 0);
    if (!d || !mw) return INVALID_ARGUMENT;
    *mw = (unsigned int)fake_int(d, "power_mw", 0);
    return SUCCESS;
}

int mtmlDeviceInitMemory(void *dev, void **mem) {
    if (!row(dev, 0) || !mem) return INVALID_ARGUMENT;
    *mem = (void *)((uintptr_t)dev + 0x100);
    return SUCCESS;
}
int mtmlDeviceFreeMemory(void *mem) { (void)mem; return SUCCESS; }

int mtmlMemoryGetTotal(void *mem, uint64_t *v) {
    const fake_row *d = row(mem, 0x100);
    if (!d || !v) return INVALID_ARGUMENT;
    *v = (uint64_t)fake_int(d, "mem_total", 0);
    return SUCCESS;
}

int mtmlMemoryGetUsed(void *mem, uint64_t *v) {
    const fake_row *d = row(mem, 0x100);
    if (!d || !v) return INVALID_ARGUMENT;
    *v = (uint64_t)fake_int(d, "mem_used", 0);
    return SUCCESS;
}

#ifndef FAKE_OMIT_ECC
int mtmlMemoryGetEccErrorCounter(void *mem, unsigned int type, unsigned int counter,
                                 unsigned int location, unsigned long long *count) {
    const fake_row *d = row(mem, 0x100);
    if (!d || !count || type != 1 || counter != 0 || location != 1) return INVALID_ARGUMENT;
    long long ue = fake_int(d, "ecc_ue", 0);
    if (ue < 0) return NOT_SUPPORTED;
    *count = (unsigned long long)ue;
    return SUCCESS;
}
#endif

int mtmlDeviceInitGpu(void *dev, void **gpu) {
    if (!row(dev, 0) || !gpu) return INVALID_ARGUMENT;
    *gpu = (void *)((uintptr_t)dev + 0x200);
    return SUCCESS;
}
int mtmlDeviceFreeGpu(void *gpu) { (void)gpu; return SUCCESS; }

int mtmlGpuGetUtilization(void *gpu, unsigned int *v) {
    const fake_row *d = row(gpu, 0x200);
    if (!d || !v) return INVALID_ARGUMENT;
    *v = (unsigned int)fake_int(d, "util", 0);
    return SUCCESS;
}

int mtmlGpuGetTemperature(void *gpu, unsigned int *v) {
    const fake_row *d = row(gpu, 0x200);
    if (!d || !v) return INVALID_ARGUMENT;
    *v = (unsigned int)fake_int(d, "temp", 0);
    return SUCCESS;
}
