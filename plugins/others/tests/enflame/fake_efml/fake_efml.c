/* A fake EFML (libefml.so) for the Enflame plugin's tests: the real symbol names and
 * signatures of Enflame's efml.h, answering from the device table of fake_table.h.
 *
 * Table keys (per device): name, uuid, domain, bus, dev, func, mem_total (MiB),
 * mem_used (MiB), healthy (1/0), health_rc (return code of EfmlGetDevIsHealth), usage
 * (percent; -1: not supported), temp (C; -1: not supported), power (W; -1: not supported).
 * Global keys: init (return code of EfmlInit).
 */
#include <stdbool.h>
#include <stdint.h>
#include "fake_table.h"

#define TABLE "FAKE_EFML_TABLE"
#define OK 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define BUF 128

typedef struct {
    char name[BUF];
    uint32_t vendor_id, device_id, domain_id, bus_id, dev_id, func_id, logic_id;
} efmlDeviceInfo_t;
typedef struct { uint64_t mem_total_size; uint32_t mem_used; } efmlDevMemInfo_t;
typedef struct { float cur_asic_temp, cur_mem_temp, cur_board_temp; } efmlDevThermalInfoV2_t;
typedef struct { float pwr_capability, cur_pwr_consumption; } efmlDevPowerInfo_t;

static int initialised;

static const fake_row *dev(uint32_t idx) {
    fake_load(TABLE);
    return fake_device(idx);
}

int EfmlInit(bool no_driver) {
    (void)no_driver;
    fake_load(TABLE);
    int rc = (int)fake_int(&fake_global_row, "init", OK);
    initialised = rc == OK;
    return rc;
}

void EfmlShutdown(void) { initialised = 0; }

int EfmlGetDevCount(uint32_t *count) {
    if (!initialised) return 1;
    fake_load(TABLE);
    *count = (uint32_t)fake_device_count;
    return OK;
}

int EfmlGetDevName(uint32_t idx, char *out) {
    const fake_row *d = dev(idx);
    if (!d) return INVALID_ARGUMENT;
    fake_copy(out, BUF, fake_str(d, "name", "S60"));
    return OK;
}

int EfmlGetDevUuid(uint32_t idx, char *out) {
    const fake_row *d = dev(idx);
    if (!d) return INVALID_ARGUMENT;
    fake_copy(out, BUF, fake_str(d, "uuid", ""));
    return OK;
}

int EfmlGetDevInfo(uint32_t idx, efmlDeviceInfo_t *info) {
    const fake_row *d = dev(idx);
    if (!d) return INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    fake_copy(info->name, BUF, fake_str(d, "name", "S60"));
    info->vendor_id = 0x1e36;
    info->domain_id = (uint32_t)fake_int(d, "domain", 0);
    info->bus_id = (uint32_t)fake_int(d, "bus", idx + 1);
    info->dev_id = (uint32_t)fake_int(d, "dev", 0);
    info->func_id = (uint32_t)fake_int(d, "func", 0);
    info->logic_id = idx;
    return OK;
}

int EfmlGetDevMem(uint32_t idx, efmlDevMemInfo_t *mem) {
    const fake_row *d = dev(idx);
    if (!d) return INVALID_ARGUMENT;
    mem->mem_total_size = (uint64_t)fake_int(d, "mem_total", 49152);
    mem->mem_used = (uint32_t)fake_int(d, "mem_used", 0);
    return OK;
}

int EfmlGetDevIsHealth(uint32_t idx, bool *healthy) {
    const fake_row *d = dev(idx);
    if (!d) return INVALID_ARGUMENT;
    int rc = (int)fake_int(d, "health_rc", OK);
    if (rc != OK) return rc;
    *healthy = fake_int(d, "healthy", 1) != 0;
    return OK;
}

static int reading(uint32_t idx, const char *key, float *out) {
    const fake_row *d = dev(idx);
    if (!d) return INVALID_ARGUMENT;
    long long v = fake_int(d, key, 0);
    if (v < 0) return NOT_SUPPORTED;
    *out = (float)v;
    return OK;
}

int EfmlGetDevDtuUsage(uint32_t idx, float *usage) { return reading(idx, "usage", usage); }

int EfmlGetDevTempV2(uint32_t idx, efmlDevThermalInfoV2_t *t) {
    memset(t, 0, sizeof *t);
    return reading(idx, "temp", &t->cur_asic_temp);
}

int EfmlGetDevPwr(uint32_t idx, efmlDevPowerInfo_t *p) {
    memset(p, 0, sizeof *p);
    p->pwr_capability = 300.0f;
    return reading(idx, "power", &p->cur_pwr_consumption);
}
