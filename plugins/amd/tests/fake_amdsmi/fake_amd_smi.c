/*
 * A fake libamd_smi.so for the AMD plugin's tests.
 *
 * Why: no test machine has an AMD GPU, yet the plugin must be tested through its real path:
 * the core loader dlopens this file on the vendor thread, the real `amdsmi` Python package
 * (its ctypes wrapper) binds every symbol it knows, and each Python call crosses into C with
 * the wrapper's struct layouts. This file implements the calls the plugin makes, with the
 * layouts of the wrapper the project pins (amdsmi 7.0.x, ROCm 7.0's amdsmi.h); the test
 * `test_amd_fake_layouts.py` checks every struct below against the installed wrapper, field
 * by field, so the fake cannot drift from what the real library would write.
 *
 * The test helper (amd_fakes.py) generates "fake_generated.inc", included at the end:
 *   - fake_gpus[]: the device table the test chose, FAKE_GPU_COUNT, FAKE_INIT_STATUS;
 *   - fake_failures[]: (function, device index or -1, status) the test wants returned;
 *   - a stub returning AMDSMI_STATUS_NOT_SUPPORTED for every other symbol the wrapper binds
 *     at import (it binds all of them, so a missing one fails `import amdsmi`).
 * A test removes a symbol by defining OMIT_<symbol> (and the helper then writes no stub).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

typedef uint32_t amdsmi_status_t;
typedef void *amdsmi_processor_handle;
typedef void *amdsmi_socket_handle;

/* Status codes (amdsmi.h, amdsmi_status_t). */
#define AMDSMI_STATUS_SUCCESS 0
#define AMDSMI_STATUS_INVAL 1
#define AMDSMI_STATUS_NOT_SUPPORTED 2
#define AMDSMI_STATUS_NOT_INIT 32
#define AMDSMI_STATUS_INSUFFICIENT_SIZE 41

#define AMDSMI_INIT_AMD_GPUS 2ULL
#define AMDSMI_PROCESSOR_TYPE_AMD_GPU 1
#define AMDSMI_MEM_TYPE_VRAM 0
#define AMDSMI_GPU_BLOCK_UMC 1
#define AMDSMI_TEMPERATURE_TYPE_EDGE 0
#define AMDSMI_TEMPERATURE_TYPE_HOTSPOT 1
#define AMDSMI_TEMP_CURRENT 0
#define AMDSMI_LINK_TYPE_INTERNAL 0
#define AMDSMI_LINK_TYPE_PCIE 1
#define AMDSMI_LINK_TYPE_XGMI 2
#define AMDSMI_GPU_UUID_SIZE 38
#define NA32 0xFFFFFFFFu

/* ---- The library's structs, as amdsmi 7.0's wrapper declares them (all packed). ---------- */

typedef union {
    struct {
        uint64_t function_number : 3;
        uint64_t device_number : 5;
        uint64_t bus_number : 8;
        uint64_t domain_number : 48;
    } fields;
    uint64_t as_uint;
} __attribute__((packed)) amdsmi_bdf_t;

typedef struct {
    char market_name[256];
    uint32_t vendor_id;
    char vendor_name[256];
    uint32_t subvendor_id;
    uint64_t device_id;
    uint32_t rev_id;
    char asic_serial[256];
    uint32_t oam_id;
    uint32_t num_of_compute_units;
    uint8_t padding0[4];
    uint64_t target_graphics_version;
    uint32_t subsystem_id;
    uint32_t reserved[21];
} __attribute__((packed)) amdsmi_asic_info_t;

typedef struct {
    uint32_t drm_render;
    uint32_t drm_card;
    uint32_t hsa_id;
    uint32_t hip_id;
    char hip_uuid[256];
} __attribute__((packed)) amdsmi_enumeration_info_t;

typedef struct {
    uint64_t kfd_id;
    uint32_t node_id;
    uint32_t current_partition_id;
    uint32_t reserved[12];
} __attribute__((packed)) amdsmi_kfd_info_t;

typedef struct {
    uint32_t vram_total; /* MB */
    uint32_t vram_used;  /* MB */
    uint32_t reserved[2];
} __attribute__((packed)) amdsmi_vram_usage_t;

typedef struct {
    uint8_t xgmi_lanes;
    uint8_t padding0[7];
    uint64_t xgmi_hive_id;
    uint64_t xgmi_node_id;
    uint32_t index;
    uint32_t reserved[9];
} __attribute__((packed)) amdsmi_xgmi_info_t;

typedef struct {
    uint32_t gfx_activity;
    uint32_t umc_activity;
    uint32_t mm_activity;
    uint32_t reserved[13];
} __attribute__((packed)) amdsmi_engine_usage_t;

typedef struct {
    uint64_t socket_power;
    uint32_t current_socket_power;
    uint32_t average_socket_power;
    uint64_t gfx_voltage;
    uint64_t soc_voltage;
    uint64_t mem_voltage;
    uint32_t power_limit;
    uint8_t padding0[4];
    uint64_t reserved[18];
} __attribute__((packed)) amdsmi_power_info_t;

typedef struct {
    uint64_t correctable_count;
    uint64_t uncorrectable_count;
    uint64_t deferred_count;
    uint64_t reserved[5];
} __attribute__((packed)) amdsmi_error_count_t;

typedef struct {
    uint64_t gfx;
    uint64_t enc;
    uint32_t reserved[12];
} __attribute__((packed)) amdsmi_proc_engine_usage_t;

typedef struct {
    uint64_t gtt_mem;
    uint64_t cpu_mem;
    uint64_t vram_mem;
    uint32_t reserved[10];
} __attribute__((packed)) amdsmi_proc_memory_usage_t;

typedef struct {
    char name[256];
    uint32_t pid;
    uint8_t padding0[4];
    uint64_t mem;
    amdsmi_proc_engine_usage_t engine_usage;
    amdsmi_proc_memory_usage_t memory_usage;
    char container_name[256];
    uint32_t cu_occupancy;
    uint32_t reserved[11];
} __attribute__((packed)) amdsmi_proc_info_t;

typedef struct {
    uint32_t major;
    uint32_t minor;
    uint32_t release;
    uint8_t padding0[4];
    const char *build;
} __attribute__((packed)) amdsmi_version_t;

/* ---- The device table the test chooses. -------------------------------------------------- */

typedef struct {
    uint32_t pid;
    const char *name;
    uint64_t vram_bytes;
} fake_proc_t;

#define FAKE_MAX_PROCS 8

typedef struct {
    const char *uuid;
    uint64_t serial;              /* the ASIC unique id; 0: not readable */
    const char *market_name;
    uint64_t device_id;
    uint32_t compute_units;       /* NA32: not reported */
    uint64_t gfx_target;          /* 0x942 for gfx942 */
    uint64_t domain, bus, device, function;
    uint64_t vram_total;          /* bytes */
    uint64_t vram_used;           /* bytes */
    uint32_t numa_node;
    uint32_t drm_render, drm_card, hsa_id, hip_id;
    uint32_t kfd_node;
    uint32_t partition_id;
    const char *compute_partition; /* NULL: partitioning not supported */
    const char *memory_partition;
    uint64_t xgmi_hive;           /* 0: no XGMI */
    uint32_t gfx_activity, umc_activity, mm_activity;
    int64_t temp_edge, temp_hotspot;
    uint32_t power_current, power_average;
    uint64_t ecc_correctable, ecc_uncorrectable;
    uint32_t n_procs;
    fake_proc_t procs[FAKE_MAX_PROCS];
} fake_gpu_t;

typedef struct {
    const char *function;
    int device; /* -1: every device (and calls without one) */
    amdsmi_status_t status;
} fake_failure_t;

static int fake_refcount = 0;
static int fake_socket = 0;
static long fake_init_tid = 0; /* the OS thread that called amdsmi_init last */

static fake_gpu_t *fake_device(amdsmi_processor_handle handle);
static amdsmi_status_t fake_fail(const char *function, amdsmi_processor_handle handle);

#define CHECK(handle)                                                          \
    do {                                                                       \
        amdsmi_status_t _s = fake_fail(__func__, (handle));                    \
        if (_s != AMDSMI_STATUS_SUCCESS) return _s;                            \
        if (fake_refcount <= 0) return AMDSMI_STATUS_NOT_INIT;                 \
    } while (0)

#define DEVICE(var, handle)                                                    \
    CHECK(handle);                                                             \
    fake_gpu_t *var = fake_device(handle);                                     \
    if (var == NULL) return AMDSMI_STATUS_INVAL

#include "fake_generated.inc"

static fake_gpu_t *fake_device(amdsmi_processor_handle handle) {
    for (int i = 0; i < FAKE_GPU_COUNT; i++)
        if (handle == (void *)&fake_gpus[i]) return &fake_gpus[i];
    return NULL;
}

static amdsmi_status_t fake_fail(const char *function, amdsmi_processor_handle handle) {
    fake_gpu_t *gpu = handle ? fake_device(handle) : NULL;
    int index = gpu ? (int)(gpu - fake_gpus) : -1;
    for (size_t i = 0; i < sizeof(fake_failures) / sizeof(fake_failures[0]); i++) {
        const fake_failure_t *f = &fake_failures[i];
        if (f->function && strcmp(f->function, function) == 0 &&
            (f->device < 0 || f->device == index))
            return f->status;
    }
    return AMDSMI_STATUS_SUCCESS;
}

static void copy_string(char *out, size_t size, const char *value) {
    snprintf(out, size, "%s", value ? value : "");
}

/* ---- Life cycle: init is reference counted, as AMD documents it. ------------------------- */

#ifndef OMIT_amdsmi_init
API amdsmi_status_t amdsmi_init(uint64_t flags) {
    if (FAKE_INIT_STATUS != AMDSMI_STATUS_SUCCESS) return FAKE_INIT_STATUS;
    if (!(flags & AMDSMI_INIT_AMD_GPUS)) return AMDSMI_STATUS_INVAL;
    fake_refcount++;
    fake_init_tid = (long)syscall(SYS_gettid);
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_shut_down
API amdsmi_status_t amdsmi_shut_down(void) {
    if (fake_refcount <= 0) return AMDSMI_STATUS_NOT_INIT;
    fake_refcount--;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_lib_version
API amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *version) {
    CHECK(NULL);
    if (version == NULL) return AMDSMI_STATUS_INVAL;
    version->major = 25;
    version->minor = 5;
    version->release = 1;
    version->build = "fake";
    return AMDSMI_STATUS_SUCCESS;
}
#endif

/* ---- Enumeration: one socket holding every GPU; NULL array asks for the count. ----------- */

#ifndef OMIT_amdsmi_get_socket_handles
API amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, amdsmi_socket_handle *handles) {
    CHECK(NULL);
    if (count == NULL) return AMDSMI_STATUS_INVAL;
    if (handles == NULL) {
        *count = 1;
        return AMDSMI_STATUS_SUCCESS;
    }
    if (*count < 1) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    handles[0] = &fake_socket;
    *count = 1;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_processor_handles
API amdsmi_status_t amdsmi_get_processor_handles(amdsmi_socket_handle socket, uint32_t *count,
                                                 amdsmi_processor_handle *handles) {
    CHECK(NULL);
    if (socket != &fake_socket || count == NULL) return AMDSMI_STATUS_INVAL;
    if (handles == NULL) {
        *count = FAKE_GPU_COUNT;
        return AMDSMI_STATUS_SUCCESS;
    }
    uint32_t n = *count < (uint32_t)FAKE_GPU_COUNT ? *count : (uint32_t)FAKE_GPU_COUNT;
    for (uint32_t i = 0; i < n; i++) handles[i] = &fake_gpus[i];
    *count = n;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_processor_type
API amdsmi_status_t amdsmi_get_processor_type(amdsmi_processor_handle h, uint32_t *type) {
    DEVICE(gpu, h);
    (void)gpu;
    *type = AMDSMI_PROCESSOR_TYPE_AMD_GPU;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

/* ---- Identity and static facts. ---------------------------------------------------------- */

#ifndef OMIT_amdsmi_get_gpu_device_uuid
API amdsmi_status_t amdsmi_get_gpu_device_uuid(amdsmi_processor_handle h, uint32_t *length,
                                               char *uuid) {
    DEVICE(gpu, h);
    if (length == NULL || uuid == NULL) return AMDSMI_STATUS_INVAL;
    if (*length < AMDSMI_GPU_UUID_SIZE) return AMDSMI_STATUS_INSUFFICIENT_SIZE;
    copy_string(uuid, *length, gpu->uuid);
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_device_bdf
API amdsmi_status_t amdsmi_get_gpu_device_bdf(amdsmi_processor_handle h, amdsmi_bdf_t *bdf) {
    DEVICE(gpu, h);
    if (bdf == NULL) return AMDSMI_STATUS_INVAL;
    bdf->fields.function_number = gpu->function;
    bdf->fields.device_number = gpu->device;
    bdf->fields.bus_number = gpu->bus;
    bdf->fields.domain_number = gpu->domain;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_asic_info
API amdsmi_status_t amdsmi_get_gpu_asic_info(amdsmi_processor_handle h, amdsmi_asic_info_t *info) {
    DEVICE(gpu, h);
    if (info == NULL) return AMDSMI_STATUS_INVAL;
    memset(info, 0, sizeof(*info));
    copy_string(info->market_name, sizeof(info->market_name), gpu->market_name);
    info->vendor_id = 0x1002; /* AMD's PCI vendor id */
    copy_string(info->vendor_name, sizeof(info->vendor_name), "Advanced Micro Devices Inc.");
    info->subvendor_id = 0x1002;
    info->device_id = gpu->device_id;
    info->rev_id = 0;
    if (gpu->serial != 0)
        snprintf(info->asic_serial, sizeof(info->asic_serial), "%016llX",
                 (unsigned long long)gpu->serial);
    info->oam_id = NA32;
    info->num_of_compute_units = gpu->compute_units;
    info->target_graphics_version = gpu->gfx_target;
    info->subsystem_id = NA32;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_enumeration_info
API amdsmi_status_t amdsmi_get_gpu_enumeration_info(amdsmi_processor_handle h,
                                                    amdsmi_enumeration_info_t *info) {
    DEVICE(gpu, h);
    if (info == NULL) return AMDSMI_STATUS_INVAL;
    memset(info, 0, sizeof(*info));
    info->drm_render = gpu->drm_render;
    info->drm_card = gpu->drm_card;
    info->hsa_id = gpu->hsa_id;
    info->hip_id = gpu->hip_id;
    snprintf(info->hip_uuid, sizeof(info->hip_uuid), "GPU-%016llx",
             (unsigned long long)gpu->serial);
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_kfd_info
API amdsmi_status_t amdsmi_get_gpu_kfd_info(amdsmi_processor_handle h, amdsmi_kfd_info_t *info) {
    DEVICE(gpu, h);
    if (info == NULL) return AMDSMI_STATUS_INVAL;
    memset(info, 0, sizeof(*info));
    info->kfd_id = 1000 + gpu->kfd_node;
    info->node_id = gpu->kfd_node;
    info->current_partition_id = gpu->partition_id;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_memory_total
API amdsmi_status_t amdsmi_get_gpu_memory_total(amdsmi_processor_handle h, uint32_t type,
                                                uint64_t *total) {
    DEVICE(gpu, h);
    if (total == NULL) return AMDSMI_STATUS_INVAL;
    if (type != AMDSMI_MEM_TYPE_VRAM) return AMDSMI_STATUS_NOT_SUPPORTED;
    *total = gpu->vram_total;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_memory_usage
API amdsmi_status_t amdsmi_get_gpu_memory_usage(amdsmi_processor_handle h, uint32_t type,
                                                uint64_t *used) {
    DEVICE(gpu, h);
    if (used == NULL) return AMDSMI_STATUS_INVAL;
    if (type != AMDSMI_MEM_TYPE_VRAM) return AMDSMI_STATUS_NOT_SUPPORTED;
    *used = gpu->vram_used;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_vram_usage
API amdsmi_status_t amdsmi_get_gpu_vram_usage(amdsmi_processor_handle h,
                                              amdsmi_vram_usage_t *usage) {
    DEVICE(gpu, h);
    if (usage == NULL) return AMDSMI_STATUS_INVAL;
    memset(usage, 0, sizeof(*usage));
    usage->vram_total = (uint32_t)(gpu->vram_total / (1024 * 1024));
    usage->vram_used = (uint32_t)(gpu->vram_used / (1024 * 1024));
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_topo_get_numa_node_number
API amdsmi_status_t amdsmi_topo_get_numa_node_number(amdsmi_processor_handle h, uint32_t *node) {
    DEVICE(gpu, h);
    if (node == NULL) return AMDSMI_STATUS_INVAL;
    *node = gpu->numa_node;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

static amdsmi_status_t partition_string(const char *value, char *out, uint32_t len) {
    if (value == NULL) return AMDSMI_STATUS_NOT_SUPPORTED;
    if (out == NULL || len == 0) return AMDSMI_STATUS_INVAL;
    snprintf(out, len, "%s", value);
    return strlen(value) + 1 > len ? AMDSMI_STATUS_INSUFFICIENT_SIZE : AMDSMI_STATUS_SUCCESS;
}

#ifndef OMIT_amdsmi_get_gpu_compute_partition
API amdsmi_status_t amdsmi_get_gpu_compute_partition(amdsmi_processor_handle h, char *out,
                                                     uint32_t len) {
    DEVICE(gpu, h);
    return partition_string(gpu->compute_partition, out, len);
}
#endif

#ifndef OMIT_amdsmi_get_gpu_memory_partition
API amdsmi_status_t amdsmi_get_gpu_memory_partition(amdsmi_processor_handle h, char *out,
                                                    uint32_t len) {
    DEVICE(gpu, h);
    return partition_string(gpu->memory_partition, out, len);
}
#endif

#ifndef OMIT_amdsmi_get_xgmi_info
API amdsmi_status_t amdsmi_get_xgmi_info(amdsmi_processor_handle h, amdsmi_xgmi_info_t *info) {
    DEVICE(gpu, h);
    if (info == NULL) return AMDSMI_STATUS_INVAL;
    if (gpu->xgmi_hive == 0) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(info, 0, sizeof(*info));
    info->xgmi_lanes = 16;
    info->xgmi_hive_id = gpu->xgmi_hive;
    info->xgmi_node_id = gpu->kfd_node;
    info->index = (uint32_t)(gpu - fake_gpus);
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_topo_get_link_type
API amdsmi_status_t amdsmi_topo_get_link_type(amdsmi_processor_handle a, amdsmi_processor_handle b,
                                              uint64_t *hops, uint32_t *type) {
    DEVICE(src, a);
    DEVICE(dst, b);
    if (hops == NULL || type == NULL) return AMDSMI_STATUS_INVAL;
    if (src->serial != 0 && src->serial == dst->serial) {
        *hops = 0; /* two partitions of one physical GPU */
        *type = AMDSMI_LINK_TYPE_INTERNAL;
    } else if (src->xgmi_hive != 0 && src->xgmi_hive == dst->xgmi_hive) {
        *hops = 1;
        *type = AMDSMI_LINK_TYPE_XGMI;
    } else {
        *hops = 2;
        *type = AMDSMI_LINK_TYPE_PCIE;
    }
    return AMDSMI_STATUS_SUCCESS;
}
#endif

/* ---- Telemetry. --------------------------------------------------------------------------- */

#ifndef OMIT_amdsmi_get_gpu_activity
API amdsmi_status_t amdsmi_get_gpu_activity(amdsmi_processor_handle h,
                                            amdsmi_engine_usage_t *usage) {
    DEVICE(gpu, h);
    if (usage == NULL) return AMDSMI_STATUS_INVAL;
    memset(usage, 0, sizeof(*usage));
    usage->gfx_activity = gpu->gfx_activity;
    usage->umc_activity = gpu->umc_activity;
    usage->mm_activity = gpu->mm_activity;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_temp_metric
API amdsmi_status_t amdsmi_get_temp_metric(amdsmi_processor_handle h, uint32_t sensor,
                                           uint32_t metric, int64_t *value) {
    DEVICE(gpu, h);
    if (value == NULL) return AMDSMI_STATUS_INVAL;
    if (metric != AMDSMI_TEMP_CURRENT) return AMDSMI_STATUS_NOT_SUPPORTED;
    if (sensor == AMDSMI_TEMPERATURE_TYPE_EDGE && gpu->temp_edge >= 0) {
        *value = gpu->temp_edge;
        return AMDSMI_STATUS_SUCCESS;
    }
    if (sensor == AMDSMI_TEMPERATURE_TYPE_HOTSPOT && gpu->temp_hotspot >= 0) {
        *value = gpu->temp_hotspot;
        return AMDSMI_STATUS_SUCCESS;
    }
    return AMDSMI_STATUS_NOT_SUPPORTED;
}
#endif

#ifndef OMIT_amdsmi_get_power_info
API amdsmi_status_t amdsmi_get_power_info(amdsmi_processor_handle h, amdsmi_power_info_t *info) {
    DEVICE(gpu, h);
    if (info == NULL) return AMDSMI_STATUS_INVAL;
    memset(info, 0, sizeof(*info));
    info->socket_power = gpu->power_current != 0xFFFF ? gpu->power_current : gpu->power_average;
    info->current_socket_power = gpu->power_current;
    info->average_socket_power = gpu->power_average;
    info->gfx_voltage = 0xFFFF;
    info->soc_voltage = 0xFFFF;
    info->mem_voltage = 0xFFFF;
    info->power_limit = 750;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_ecc_count
API amdsmi_status_t amdsmi_get_gpu_ecc_count(amdsmi_processor_handle h, uint32_t block,
                                             amdsmi_error_count_t *count) {
    DEVICE(gpu, h);
    if (count == NULL) return AMDSMI_STATUS_INVAL;
    if (block != AMDSMI_GPU_BLOCK_UMC) return AMDSMI_STATUS_NOT_SUPPORTED;
    memset(count, 0, sizeof(*count));
    count->correctable_count = gpu->ecc_correctable;
    count->uncorrectable_count = gpu->ecc_uncorrectable;
    return AMDSMI_STATUS_SUCCESS;
}
#endif

#ifndef OMIT_amdsmi_get_gpu_process_list
/* In: *max_processes is the room in list. Out: the number of processes; when they do not
 * fit, the room is filled and AMDSMI_STATUS_OUT_OF_RESOURCES is returned (amdsmi.h). */
API amdsmi_status_t amdsmi_get_gpu_process_list(amdsmi_processor_handle h, uint32_t *max_processes,
                                                amdsmi_proc_info_t *list) {
    DEVICE(gpu, h);
    if (max_processes == NULL) return AMDSMI_STATUS_INVAL;
    uint32_t room = *max_processes;
    uint32_t n = gpu->n_procs < room ? gpu->n_procs : room;
    for (uint32_t i = 0; list != NULL && i < n; i++) {
        amdsmi_proc_info_t *p = &list[i];
        memset(p, 0, sizeof(*p));
        copy_string(p->name, sizeof(p->name), gpu->procs[i].name);
        p->pid = gpu->procs[i].pid;
        p->mem = gpu->procs[i].vram_bytes;
        p->memory_usage.vram_mem = gpu->procs[i].vram_bytes;
        p->cu_occupancy = NA32;
    }
    *max_processes = gpu->n_procs;
    return gpu->n_procs > room ? 15 /* AMDSMI_STATUS_OUT_OF_RESOURCES */ : AMDSMI_STATUS_SUCCESS;
}
#endif

/* ---- Test controls (not part of libamd_smi): change the table while it is loaded. -------- */

API int fake_set_ecc_uncorrectable(int index, uint64_t count) {
    if (index < 0 || index >= FAKE_GPU_COUNT) return -1;
    fake_gpus[index].ecc_uncorrectable = count;
    return 0;
}

API int fake_refcount_value(void) { return fake_refcount; }

API long fake_init_thread(void) { return fake_init_tid; }

/* ---- Layouts, for the test that compares them with the installed wrapper. ---------------- */

typedef struct {
    const char *type;
    const char *field; /* NULL: the struct's size */
    size_t value;
} fake_layout_t;

#define SIZE(t) {#t, NULL, sizeof(t)}
#define FIELD(t, f) {#t, #f, offsetof(t, f)}

static const fake_layout_t fake_layouts[] = {
    SIZE(amdsmi_bdf_t),
    SIZE(amdsmi_asic_info_t),
    FIELD(amdsmi_asic_info_t, market_name),
    FIELD(amdsmi_asic_info_t, vendor_id),
    FIELD(amdsmi_asic_info_t, vendor_name),
    FIELD(amdsmi_asic_info_t, subvendor_id),
    FIELD(amdsmi_asic_info_t, device_id),
    FIELD(amdsmi_asic_info_t, rev_id),
    FIELD(amdsmi_asic_info_t, asic_serial),
    FIELD(amdsmi_asic_info_t, oam_id),
    FIELD(amdsmi_asic_info_t, num_of_compute_units),
    FIELD(amdsmi_asic_info_t, target_graphics_version),
    FIELD(amdsmi_asic_info_t, subsystem_id),
    SIZE(amdsmi_enumeration_info_t),
    FIELD(amdsmi_enumeration_info_t, drm_render),
    FIELD(amdsmi_enumeration_info_t, drm_card),
    FIELD(amdsmi_enumeration_info_t, hsa_id),
    FIELD(amdsmi_enumeration_info_t, hip_id),
    FIELD(amdsmi_enumeration_info_t, hip_uuid),
    SIZE(amdsmi_kfd_info_t),
    FIELD(amdsmi_kfd_info_t, kfd_id),
    FIELD(amdsmi_kfd_info_t, node_id),
    FIELD(amdsmi_kfd_info_t, current_partition_id),
    SIZE(amdsmi_vram_usage_t),
    FIELD(amdsmi_vram_usage_t, vram_total),
    FIELD(amdsmi_vram_usage_t, vram_used),
    SIZE(amdsmi_xgmi_info_t),
    FIELD(amdsmi_xgmi_info_t, xgmi_lanes),
    FIELD(amdsmi_xgmi_info_t, xgmi_hive_id),
    FIELD(amdsmi_xgmi_info_t, xgmi_node_id),
    FIELD(amdsmi_xgmi_info_t, index),
    SIZE(amdsmi_engine_usage_t),
    FIELD(amdsmi_engine_usage_t, gfx_activity),
    FIELD(amdsmi_engine_usage_t, umc_activity),
    FIELD(amdsmi_engine_usage_t, mm_activity),
    SIZE(amdsmi_power_info_t),
    FIELD(amdsmi_power_info_t, socket_power),
    FIELD(amdsmi_power_info_t, current_socket_power),
    FIELD(amdsmi_power_info_t, average_socket_power),
    FIELD(amdsmi_power_info_t, gfx_voltage),
    FIELD(amdsmi_power_info_t, soc_voltage),
    FIELD(amdsmi_power_info_t, mem_voltage),
    FIELD(amdsmi_power_info_t, power_limit),
    SIZE(amdsmi_error_count_t),
    FIELD(amdsmi_error_count_t, correctable_count),
    FIELD(amdsmi_error_count_t, uncorrectable_count),
    FIELD(amdsmi_error_count_t, deferred_count),
    SIZE(amdsmi_proc_info_t),
    FIELD(amdsmi_proc_info_t, name),
    FIELD(amdsmi_proc_info_t, pid),
    FIELD(amdsmi_proc_info_t, mem),
    FIELD(amdsmi_proc_info_t, engine_usage),
    FIELD(amdsmi_proc_info_t, memory_usage),
    FIELD(amdsmi_proc_info_t, container_name),
    FIELD(amdsmi_proc_info_t, cu_occupancy),
    SIZE(amdsmi_version_t),
    FIELD(amdsmi_version_t, major),
    FIELD(amdsmi_version_t, minor),
    FIELD(amdsmi_version_t, release),
    FIELD(amdsmi_version_t, build),
};

API int fake_layout_count(void) { return (int)(sizeof(fake_layouts) / sizeof(fake_layouts[0])); }

API const char *fake_layout_type(int i) { return fake_layouts[i].type; }

API const char *fake_layout_field(int i) { return fake_layouts[i].field; }

API size_t fake_layout_value(int i) { return fake_layouts[i].value; }
