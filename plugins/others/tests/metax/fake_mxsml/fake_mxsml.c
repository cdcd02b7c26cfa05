/* A fake of MetaX's MXSML (libmxsml.so): the mxSml* calls the plugin makes.
 *
 * Devices come from the table named by FAKE_MXSML_TABLE (see fake_table.h). Keys:
 *   global: init=<return code of mxSmlInit>
 *   device: uuid= name= bdf= mode= (0 native, 1 PF, 2 VF) vram_kib= vram_used_kib=
 *           dram_ue= (-1 = unsupported) usage= temp_centi= power_mw= (split over 2 ways)
 * Compile with -DFAKE_OMIT_ECC to leave mxSmlGetTotalEccErrors out.
 */
#include "fake_table.h"

#define TABLE "FAKE_MXSML_TABLE"
#define SUCCESS 0u
#define NOT_SUPPORTED 3u
#define INVALID_DEVICE 6u

typedef struct {
    unsigned int deviceId, type;
    char bdfId[32];
    unsigned int gpuId, nodeId;
    char uuid[96];
    unsigned int brand, mode;
    char deviceName[32];
} mxSmlDeviceInfo_t;
typedef struct { long visVramTotal, visVramUse, vramTotal, vramUse, xttTotal, xttUse; } mxSmlMemoryInfo_t;
typedef struct { unsigned int sramCE, sramUE, dramCE, dramUE, retiredPage; } mxSmlEccErrorCount_t;
typedef struct { unsigned int voltage, current, power; } mxSmlBoardWayElectricInfo_t;

static const fake_row *dev(unsigned int i) { fake_load(TABLE); return fake_device(i); }

unsigned int mxSmlInit(void) { fake_load(TABLE); return (unsigned)fake_int(&fake_global_row, "init", 0); }
unsigned int mxSmlGetDeviceCount(void) { fake_load(TABLE); return (unsigned)fake_device_count; }

unsigned int mxSmlGetDeviceInfo(unsigned int i, mxSmlDeviceInfo_t *info) {
    const fake_row *d = dev(i);
    if (!d || !info) return INVALID_DEVICE;
    memset(info, 0, sizeof *info);
    info->deviceId = i;
    info->mode = (unsigned)fake_int(d, "mode", 0);
    fake_copy(info->bdfId, sizeof info->bdfId, fake_str(d, "bdf", "0000:00:00.0"));
    fake_copy(info->uuid, sizeof info->uuid, fake_str(d, "uuid", "GPU-metax"));
    fake_copy(info->deviceName, sizeof info->deviceName, fake_str(d, "name", "MXC500"));
    return SUCCESS;
}

unsigned int mxSmlGetMemoryInfo(unsigned int i, mxSmlMemoryInfo_t *m) {
    const fake_row *d = dev(i);
    if (!d || !m) return INVALID_DEVICE;
    memset(m, 0, sizeof *m);
    m->vramTotal = (long)fake_int(d, "vram_kib", 0);
    m->vramUse = (long)fake_int(d, "vram_used_kib", 0);
    return SUCCESS;
}

#ifndef FAKE_OMIT_ECC
unsigned int mxSmlGetTotalEccErrors(unsigned int i, mxSmlEccErrorCount_t *e) {
    const fake_row *d = dev(i);
    if (!d || !e) return INVALID_DEVICE;
    long long ue = fake_int(d, "dram_ue", 0);
    if (ue < 0) return NOT_SUPPORTED;
    memset(e, 0, sizeof *e);
    e->dramUE = (unsigned)ue;
    return SUCCESS;
}
#endif

unsigned int mxSmlGetDeviceIpUsage(unsigned int i, unsigned int ip, int *usage) {
    const fake_row *d = dev(i);
    if (!d || !usage) return INVALID_DEVICE;
    if (ip != 4) return NOT_SUPPORTED;
    *usage = (int)fake_int(d, "usage", 0);
    return SUCCESS;
}

unsigned int mxSmlGetTemperatureInfo(unsigned int i, unsigned int sensor, int *t) {
    const fake_row *d = dev(i);
    if (!d || !t || sensor != 0) return INVALID_DEVICE;
    *t = (int)fake_int(d, "temp_centi", 0);
    return SUCCESS;
}

unsigned int mxSmlGetBoardPowerInfo(unsigned int i, unsigned int *size, mxSmlBoardWayElectricInfo_t *w) {
    const fake_row *d = dev(i);
    if (!d || !size || !w || *size < 2) return INVALID_DEVICE;
    unsigned int total = (unsigned)fake_int(d, "power_mw", 0);
    memset(w, 0, 2 * sizeof *w);
    w[0].power = total / 2;
    w[1].power = total - total / 2;
    *size = 2;
    return SUCCESS;
}
