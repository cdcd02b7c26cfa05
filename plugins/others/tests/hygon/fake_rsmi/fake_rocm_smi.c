/* A fake of Hygon's ROCm SMI build (librocm_smi64.so): the rsmi_* calls the plugin makes.
 *
 * Devices come from the table named by FAKE_RSMI_TABLE (see fake_table.h). Keys:
 *   global: init=<status of rsmi_init>
 *   device: name= uid= (hex, 0 = unsupported) bus= (hex) domain= numa= (-1 = unsupported)
 *           mem_total= mem_used= (bytes) busy= temp_mc= power_uw= ecc_ue= (-1 = unsupported)
 *           render= (DRM render minor)
 * Compile with -DFAKE_OMIT_ECC to leave rsmi_dev_ecc_count_get out (an old library).
 */
#include <stdint.h>
#include "fake_table.h"

#define TABLE "FAKE_RSMI_TABLE"
#define OK 0
#define INVALID_ARGS 1
#define NOT_SUPPORTED 2
#define INIT_ERROR 8

typedef struct { uint64_t correctable_err; uint64_t uncorrectable_err; } rsmi_error_count_t;

static int init_calls, shutdown_calls;
int fake_rsmi_init_calls(void) { return init_calls; }
int fake_rsmi_shutdown_calls(void) { return shutdown_calls; }

int rsmi_init(uint64_t flags) {
    (void)flags;
    fake_load(TABLE);
    init_calls++;
    return (int)fake_int(&fake_global_row, "init", OK);
}

int rsmi_shut_down(void) { shutdown_calls++; return OK; }

int rsmi_num_monitor_devices(uint32_t *num) {
    if (!num) return INVALID_ARGS;
    fake_load(TABLE);
    *num = (uint32_t)fake_device_count;
    return OK;
}

/* Looks the device up through the exported rsmi_num_monitor_devices, as a real library's
 * internal calls do: a library loaded without RTLD_DEEPBIND would call another vendor's
 * function of the same name here, if that one was loaded globally first. */
static const fake_row *dev(uint32_t index) {
    uint32_t n = 0;
    if (rsmi_num_monitor_devices(&n) != OK || index >= n) return NULL;
    return fake_device(index);
}

int rsmi_dev_name_get(uint32_t i, char *name, size_t len) {
    const fake_row *d = dev(i);
    if (!d || !name) return INVALID_ARGS;
    fake_copy(name, len, fake_str(d, "name", "Hygon DCU"));
    return OK;
}

int rsmi_dev_unique_id_get(uint32_t i, uint64_t *id) {
    const fake_row *d = dev(i);
    if (!d || !id) return INVALID_ARGS;
    *id = (uint64_t)fake_int(d, "uid", 0);
    return *id ? OK : NOT_SUPPORTED;
}

int rsmi_dev_pci_id_get(uint32_t i, uint64_t *bdfid) {
    const fake_row *d = dev(i);
    if (!d || !bdfid) return INVALID_ARGS;
    uint64_t domain = (uint64_t)fake_int(d, "domain", 0), bus = (uint64_t)fake_int(d, "bus", 0);
    *bdfid = (domain << 32) | (bus << 8);
    return OK;
}

int rsmi_topo_numa_affinity_get(uint32_t i, int32_t *numa) {
    const fake_row *d = dev(i);
    if (!d || !numa) return INVALID_ARGS;
    *numa = (int32_t)fake_int(d, "numa", -1);
    return *numa < 0 ? NOT_SUPPORTED : OK;
}

int rsmi_dev_memory_total_get(uint32_t i, int type, uint64_t *total) {
    const fake_row *d = dev(i);
    if (!d || !total || type != 0) return INVALID_ARGS;
    *total = (uint64_t)fake_int(d, "mem_total", 0);
    return OK;
}

int rsmi_dev_memory_usage_get(uint32_t i, int type, uint64_t *used) {
    const fake_row *d = dev(i);
    if (!d || !used || type != 0) return INVALID_ARGS;
    *used = (uint64_t)fake_int(d, "mem_used", 0);
    return OK;
}

int rsmi_dev_busy_percent_get(uint32_t i, uint32_t *busy) {
    const fake_row *d = dev(i);
    if (!d || !busy) return INVALID_ARGS;
    long long v = fake_int(d, "busy", -1);
    if (v < 0) return NOT_SUPPORTED;
    *busy = (uint32_t)v;
    return OK;
}

int rsmi_dev_temp_metric_get(uint32_t i, uint32_t sensor, int metric, int64_t *temp) {
    const fake_row *d = dev(i);
    if (!d || !temp || sensor != 0 || metric != 0) return INVALID_ARGS;
    *temp = (int64_t)fake_int(d, "temp_mc", 0);
    return OK;
}

int rsmi_dev_power_ave_get(uint32_t i, uint32_t sensor, uint64_t *power) {
    const fake_row *d = dev(i);
    if (!d || !power || sensor != 0) return INVALID_ARGS;
    *power = (uint64_t)fake_int(d, "power_uw", 0);
    return OK;
}

#ifndef FAKE_OMIT_ECC
int rsmi_dev_ecc_count_get(uint32_t i, int block, rsmi_error_count_t *ec) {
    const fake_row *d = dev(i);
    if (!d || !ec || block != 0x1) return INVALID_ARGS;
    long long ue = fake_int(d, "ecc_ue", 0);
    if (ue < 0) return NOT_SUPPORTED;
    ec->correctable_err = 0;
    ec->uncorrectable_err = (uint64_t)ue;
    return OK;
}
#endif

int rsmi_dev_drm_render_minor_get(uint32_t i, uint32_t *minor) {
    const fake_row *d = dev(i);
    if (!d || !minor) return INVALID_ARGS;
    *minor = (uint32_t)fake_int(d, "render", 128 + i);
    return OK;
}
