/*
 * A fake libnvidia-ml.so.1 for the NVIDIA plugin's tests.
 *
 * Why: the plugin must be tested through its real loading path (dlopen on the vendor's
 * library thread, pynvml bound to that handle, every NVML symbol looked up by name) without
 * a GPU. This file implements exactly the NVML entry points that pynvml's wrappers for the
 * plugin's calls look up (names checked against nvidia-ml-py 13.x: e.g. pynvml's
 * nvmlDeviceGetCount() resolves "nvmlDeviceGetCount_v2", nvmlInit() resolves
 * "nvmlInitWithFlags"), with the structure layouts pynvml declares.
 *
 * Tests shape the fake through the fake_* control functions below, called with ctypes on
 * the same loaded object (dlopen of the same file returns the same handle, so the plugin
 * and the test see one state): GPUs, MIG instances, NVLink and PCIe topology, queued XID
 * events, lost GPUs and failures injected per function. fake_thread_violations() counts NVML
 * calls made on a thread other than the one that called nvmlInit, so a test can prove that
 * every call ran on the vendor's library thread.
 *
 * Not NVIDIA code: written from the public NVML API reference's signatures.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>

#define MAX_GPUS 16
#define MAX_MIGS 8
#define MAX_LINKS 18
#define MAX_PROCS 16
#define MAX_EVENTS 64
#define MAX_FAILS 32
#define MAX_SETS 8
#define MAX_GI_PROFILES 20 /* NVML_GPU_INSTANCE_PROFILE_COUNT in nvml.h 13.x is 0x12 */
#define MAX_GIS 8
#define GI_MAGIC 0x67696e73

/* nvmlReturn_t values (NVML API reference, "Error reporting"). */
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_IN_USE 19
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23
#define NVML_ERROR_UNKNOWN 999

#define NVML_TOPOLOGY_NODE 40
#define NVML_TOPOLOGY_SYSTEM 50

#define HANDLE_MAGIC 0x6e766d6c
#define MIB (1024ULL * 1024ULL)

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount,
        computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct {
    unsigned int start, size;
} nvmlPlacement_t;

/* nvmlGpuInstanceProfileInfo_v2_t (and _t: the same without version and name). */
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;

typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    void *device;
    unsigned int id, profileId;
    nvmlPlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    unsigned int version, id, sliceCount, instanceCount, multiprocessorCount,
        sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount, sharedJpegCount,
        sharedOfaCount;
    char name[96];
} nvmlComputeInstanceProfileInfo_v2_t;

typedef struct {
    void *device;
    void *gpuInstance;
    unsigned int id, profileId;
    nvmlPlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* A GPU instance profile the test gave a GPU: NVML's facts about it. */
typedef struct {
    int used;
    unsigned int id, slices, count, sms, mem_slices;
    unsigned long long mem_mib;
    unsigned int starts; /* bit i: the profile may start at memory slice i */
    char name[64];
} fake_gi_profile;

typedef struct {
    int magic;
    int used;
    int gpu;
    unsigned int id, profile_index, start;
    int mig; /* index in the GPU's migs of its compute instance's MIG device, or -1 */
} fake_gi;

typedef struct fake_handle {
    int magic;
    int is_mig;
    int alive; /* MIG devices only: 0 once its compute instance was destroyed */
    int gpu;
    char uuid[96];
    char name[96];
    unsigned long long mem_total, mem_used;
    unsigned int sm_count, slices;
    unsigned int gi_id, ci_id;
    int nprocs;
    nvmlProcessInfo_t procs[MAX_PROCS];
} fake_handle;

typedef struct {
    fake_handle h;
    int cc_major, cc_minor;
    int numa; /* -1: NVML says not supported */
    char bus_id[32];
    unsigned int domain, bus, dev;
    int minor;
    int mig_supported, mig_mode, mig_pending;
    int nmigs;
    fake_handle migs[MAX_MIGS];
    fake_gi_profile profiles[MAX_GI_PROFILES];
    fake_gi gis[MAX_GIS];
    int created; /* MIG devices created through NVML so far: names their UUIDs */
    int nlinks; /* -1: NVLink not supported */
    char link_remote[MAX_LINKS][32];
    unsigned int util_gpu, util_mem, temp, power_mw;
    int lost;
    unsigned long long supported_events;
} fake_gpu;

typedef struct {
    int gpu; /* -1: an event NVML cannot attribute to a device */
    unsigned long long type, data;
    unsigned int gi, ci;
} fake_event;

typedef struct {
    int used;
    unsigned long long mask[MAX_GPUS];
} event_set;

typedef struct {
    char fn[64];
    int gpu; /* -1: any */
    int rc;
} fake_fail_rule;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t event_ready = PTHREAD_COND_INITIALIZER;
static int ngpus;
static fake_gpu gpus[MAX_GPUS];
static int topo[MAX_GPUS][MAX_GPUS];
static int topo_set[MAX_GPUS][MAX_GPUS];
static int nevents;
static fake_event events[MAX_EVENTS];
static event_set sets[MAX_SETS];
static int nfails;
static fake_fail_rule fails[MAX_FAILS];
static int init_count;
static int initialised;
static pthread_t owner;
static int violations;
static char driver_version[80] = "550.54.15";
static int cuda_version = 12040;

/* ---------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------- */

static void note_thread(void) {
    if (initialised && !pthread_equal(owner, pthread_self()))
        violations++;
}

static int injected(const char *fn, int gpu) {
    for (int i = 0; i < nfails; i++)
        if (strcmp(fails[i].fn, fn) == 0 && (fails[i].gpu < 0 || fails[i].gpu == gpu))
            return fails[i].rc;
    return 0;
}

/* Common entry of every device call: checks init, thread, handle, lost state, failures. */
static int enter(const char *fn, void *handle, fake_handle **out) {
    note_thread();
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    fake_handle *h = (fake_handle *)handle;
    if (h == NULL || h->magic != HANDLE_MAGIC || (h->is_mig && !h->alive))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpus[h->gpu].lost)
        return NVML_ERROR_GPU_IS_LOST;
    int rc = injected(fn, h->gpu);
    if (rc)
        return rc;
    *out = h;
    return NVML_SUCCESS;
}

static void copy_str(char *dst, unsigned int len, const char *src) {
    if (len == 0)
        return;
    strncpy(dst, src, len - 1);
    dst[len - 1] = '\0';
}

static void fill_pci(nvmlPciInfo_t *pci, const fake_gpu *g) {
    memset(pci, 0, sizeof(*pci));
    copy_str(pci->busId, sizeof(pci->busId), g->bus_id);
    copy_str(pci->busIdLegacy, sizeof(pci->busIdLegacy), g->bus_id + 4);
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->dev;
    pci->pciDeviceId = 0x20b010de;
}

/* ---------------------------------------------------------------------------------------
 * control interface for tests (not NVML)
 * ------------------------------------------------------------------------------------- */

void fake_reset(void) {
    pthread_mutex_lock(&lock);
    ngpus = 0;
    memset(gpus, 0, sizeof(gpus));
    memset(topo, 0, sizeof(topo));
    memset(topo_set, 0, sizeof(topo_set));
    nevents = 0;
    memset(sets, 0, sizeof(sets));
    nfails = 0;
    violations = 0;
    init_count = 0;
    initialised = 0;
    pthread_mutex_unlock(&lock);
}

int fake_add_gpu(const char *uuid, const char *name, unsigned long long mem_mib,
                 unsigned int sm_count, int cc_major, int cc_minor, int numa,
                 const char *bus_id) {
    pthread_mutex_lock(&lock);
    if (ngpus >= MAX_GPUS) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    int i = ngpus++;
    fake_gpu *g = &gpus[i];
    memset(g, 0, sizeof(*g));
    g->h.magic = HANDLE_MAGIC;
    g->h.gpu = i;
    copy_str(g->h.uuid, sizeof(g->h.uuid), uuid);
    copy_str(g->h.name, sizeof(g->h.name), name);
    g->h.mem_total = mem_mib * MIB;
    g->h.sm_count = sm_count;
    g->cc_major = cc_major;
    g->cc_minor = cc_minor;
    g->numa = numa;
    copy_str(g->bus_id, sizeof(g->bus_id), bus_id);
    sscanf(bus_id, "%x:%x:%x", &g->domain, &g->bus, &g->dev);
    g->minor = i;
    g->nlinks = -1;
    g->mig_supported = 0;
    g->util_gpu = 0;
    g->temp = 30;
    g->power_mw = 50000;
    g->supported_events = 0x8 | 0x2 | 0x1; /* XID critical, double and single bit ECC */
    pthread_mutex_unlock(&lock);
    return i;
}

int fake_set(int gpu, const char *key, long long value) {
    int rc = 0;
    pthread_mutex_lock(&lock);
    if (gpu < 0 || gpu >= ngpus) {
        rc = -1;
    } else {
        fake_gpu *g = &gpus[gpu];
        if (!strcmp(key, "mem_used_mib")) g->h.mem_used = (unsigned long long)value * MIB;
        else if (!strcmp(key, "util_gpu")) g->util_gpu = (unsigned int)value;
        else if (!strcmp(key, "util_mem")) g->util_mem = (unsigned int)value;
        else if (!strcmp(key, "temp")) g->temp = (unsigned int)value;
        else if (!strcmp(key, "power_mw")) g->power_mw = (unsigned int)value;
        else if (!strcmp(key, "lost")) g->lost = (int)value;
        else if (!strcmp(key, "minor")) g->minor = (int)value;
        else if (!strcmp(key, "mig_supported")) g->mig_supported = (int)value;
        else if (!strcmp(key, "mig_mode")) g->mig_mode = (int)value;
        else if (!strcmp(key, "mig_pending")) g->mig_pending = (int)value;
        else if (!strcmp(key, "nlinks")) g->nlinks = (int)value;
        else if (!strcmp(key, "supported_events")) g->supported_events = (unsigned long long)value;
        else rc = -2;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int fake_set_link(int gpu, int link, const char *remote_bus_id) {
    if (gpu < 0 || gpu >= ngpus || link < 0 || link >= MAX_LINKS)
        return -1;
    pthread_mutex_lock(&lock);
    copy_str(gpus[gpu].link_remote[link], 32, remote_bus_id);
    if (gpus[gpu].nlinks <= link)
        gpus[gpu].nlinks = link + 1;
    pthread_mutex_unlock(&lock);
    return 0;
}

int fake_set_topology(int a, int b, int level) {
    if (a < 0 || b < 0 || a >= ngpus || b >= ngpus)
        return -1;
    pthread_mutex_lock(&lock);
    topo[a][b] = topo[b][a] = level;
    topo_set[a][b] = topo_set[b][a] = 1;
    pthread_mutex_unlock(&lock);
    return 0;
}

int fake_add_mig(int gpu, const char *uuid, const char *name, unsigned long long mem_mib,
                 unsigned int sm_count, unsigned int slices, unsigned int gi,
                 unsigned int ci) {
    if (gpu < 0 || gpu >= ngpus || gpus[gpu].nmigs >= MAX_MIGS)
        return -1;
    pthread_mutex_lock(&lock);
    fake_gpu *g = &gpus[gpu];
    fake_handle *m = &g->migs[g->nmigs];
    memset(m, 0, sizeof(*m));
    m->magic = HANDLE_MAGIC;
    m->is_mig = 1;
    m->alive = 1;
    m->gpu = gpu;
    copy_str(m->uuid, sizeof(m->uuid), uuid);
    copy_str(m->name, sizeof(m->name), name);
    m->mem_total = mem_mib * MIB;
    m->sm_count = sm_count;
    m->slices = slices;
    m->gi_id = gi;
    m->ci_id = ci;
    int idx = g->nmigs++;
    pthread_mutex_unlock(&lock);
    return idx;
}

/* A GPU instance profile at NVML profile index `index` (NVML_GPU_INSTANCE_PROFILE_*). */
int fake_add_gi_profile(int gpu, unsigned int index, unsigned int id, const char *name,
                        unsigned int slices, unsigned int count, unsigned int sms,
                        unsigned long long mem_mib, unsigned int mem_slices,
                        unsigned int starts) {
    if (gpu < 0 || gpu >= ngpus || index >= MAX_GI_PROFILES)
        return -1;
    pthread_mutex_lock(&lock);
    fake_gi_profile *p = &gpus[gpu].profiles[index];
    memset(p, 0, sizeof(*p));
    p->used = 1;
    p->id = id;
    p->slices = slices;
    p->count = count;
    p->sms = sms;
    p->mem_mib = mem_mib;
    p->mem_slices = mem_slices;
    p->starts = starts;
    copy_str(p->name, sizeof(p->name), name);
    pthread_mutex_unlock(&lock);
    return 0;
}

/* GPU instances that exist on `gpu` (created through NVML). */
int fake_gi_count(int gpu) {
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; gpu >= 0 && gpu < ngpus && i < MAX_GIS; i++)
        n += gpus[gpu].gis[i].used;
    pthread_mutex_unlock(&lock);
    return n;
}

/* The index in the GPU's MIG devices of the live one with `uuid`, or -1. */
int fake_mig_slot(int gpu, const char *uuid) {
    int found = -1;
    pthread_mutex_lock(&lock);
    for (int m = 0; gpu >= 0 && gpu < ngpus && m < gpus[gpu].nmigs; m++)
        if (gpus[gpu].migs[m].alive && !strcmp(gpus[gpu].migs[m].uuid, uuid))
            found = m;
    pthread_mutex_unlock(&lock);
    return found;
}

/* Memory in use on MIG device `mig` of `gpu`, in MiB. */
int fake_set_mig_memory(int gpu, int mig, unsigned long long used_mib) {
    if (gpu < 0 || gpu >= ngpus || mig < 0 || mig >= MAX_MIGS)
        return -1;
    pthread_mutex_lock(&lock);
    gpus[gpu].migs[mig].mem_used = used_mib * MIB;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Ends the processes of MIG device `mig` of `gpu` (as when its container stops). */
int fake_clear_processes(int gpu, int mig) {
    if (gpu < 0 || gpu >= ngpus)
        return -1;
    pthread_mutex_lock(&lock);
    fake_handle *h = mig < 0 ? &gpus[gpu].h : &gpus[gpu].migs[mig];
    h->nprocs = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

int fake_add_process(int gpu, int mig, unsigned int pid, unsigned long long used_mib) {
    if (gpu < 0 || gpu >= ngpus)
        return -1;
    pthread_mutex_lock(&lock);
    fake_handle *h = mig < 0 ? &gpus[gpu].h : &gpus[gpu].migs[mig];
    int rc = -1;
    if (h->nprocs < MAX_PROCS) {
        h->procs[h->nprocs].pid = pid;
        h->procs[h->nprocs].usedGpuMemory = used_mib * MIB;
        h->procs[h->nprocs].gpuInstanceId = h->gi_id;
        h->procs[h->nprocs].computeInstanceId = h->ci_id;
        h->nprocs++;
        rc = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int fake_push_event(int gpu, unsigned long long type, unsigned long long data,
                    unsigned int gi, unsigned int ci) {
    pthread_mutex_lock(&lock);
    int rc = -1;
    if (nevents < MAX_EVENTS) {
        events[nevents].gpu = gpu;
        events[nevents].type = type;
        events[nevents].data = data;
        events[nevents].gi = gi;
        events[nevents].ci = ci;
        nevents++;
        rc = 0;
        pthread_cond_broadcast(&event_ready);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int fake_pending_events(void) {
    pthread_mutex_lock(&lock);
    int n = nevents;
    pthread_mutex_unlock(&lock);
    return n;
}

/* Make NVML function `fn` return `rc` (for GPU `gpu`, or -1 for every GPU); rc 0 clears. */
int fake_fail(const char *fn, int gpu, int rc) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nfails; i++) {
        if (!strcmp(fails[i].fn, fn) && fails[i].gpu == gpu) {
            if (rc == 0) {
                fails[i] = fails[--nfails];
            } else {
                fails[i].rc = rc;
            }
            pthread_mutex_unlock(&lock);
            return 0;
        }
    }
    if (rc != 0 && nfails < MAX_FAILS) {
        copy_str(fails[nfails].fn, sizeof(fails[nfails].fn), fn);
        fails[nfails].gpu = gpu;
        fails[nfails].rc = rc;
        nfails++;
    }
    pthread_mutex_unlock(&lock);
    return 0;
}

int fake_init_count(void) { return init_count; }

int fake_thread_violations(void) { return violations; }

/* ---------------------------------------------------------------------------------------
 * NVML: life cycle and system
 * ------------------------------------------------------------------------------------- */

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    int rc = injected("nvmlInitWithFlags", -1);
    if (!rc) {
        if (init_count == 0)
            owner = pthread_self();
        else
            note_thread();
        init_count++;
        initialised = 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = initialised ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialised && --init_count == 0)
        initialised = 0;
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = initialised ? injected("nvmlSystemGetDriverVersion", -1)
                         : NVML_ERROR_UNINITIALIZED;
    if (!rc)
        copy_str(version, length, driver_version);
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlSystemGetCudaDriverVersion(int *version) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = initialised ? injected("nvmlSystemGetCudaDriverVersion", -1)
                         : NVML_ERROR_UNINITIALIZED;
    if (!rc)
        *version = cuda_version;
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

/* ---------------------------------------------------------------------------------------
 * NVML: enumeration and identity
 * ------------------------------------------------------------------------------------- */

int nvmlDeviceGetCount_v2(unsigned int *count) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = initialised ? injected("nvmlDeviceGetCount_v2", -1) : NVML_ERROR_UNINITIALIZED;
    if (!rc)
        *count = (unsigned int)ngpus;
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = NVML_SUCCESS;
    if (!initialised)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (index >= (unsigned int)ngpus)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (gpus[index].lost)
        rc = NVML_ERROR_GPU_IS_LOST;
    else
        rc = injected("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (!rc)
        *device = &gpus[index].h;
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = initialised ? NVML_ERROR_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
    for (int i = 0; initialised && i < ngpus; i++) {
        if (!strcmp(gpus[i].h.uuid, uuid)) {
            rc = gpus[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
            if (!rc)
                *device = &gpus[i].h;
        }
        for (int m = 0; m < gpus[i].nmigs; m++) {
            if (gpus[i].migs[m].alive && !strcmp(gpus[i].migs[m].uuid, uuid)) {
                rc = gpus[i].lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
                if (!rc)
                    *device = &gpus[i].migs[m];
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetUUID", device, &h);
    if (!rc)
        copy_str(uuid, length, h->uuid);
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetName", device, &h);
    if (!rc)
        copy_str(name, length, h->name);
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetMemoryInfo(void *device, nvmlMemory_t *memory) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetMemoryInfo", device, &h);
    if (!rc) {
        memory->total = h->mem_total;
        memory->used = h->mem_used;
        memory->free = h->mem_total - h->mem_used;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetCudaComputeCapability(void *device, int *major, int *minor) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetCudaComputeCapability", device, &h);
    if (!rc) {
        *major = gpus[h->gpu].cc_major;
        *minor = gpus[h->gpu].cc_minor;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetPciInfo_v3(void *device, nvmlPciInfo_t *pci) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetPciInfo_v3", device, &h);
    if (!rc)
        fill_pci(pci, &gpus[h->gpu]);
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetNumaNodeId(void *device, int *node) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetNumaNodeId", device, &h);
    if (!rc) {
        if (gpus[h->gpu].numa < 0)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else
            *node = gpus[h->gpu].numa;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetMinorNumber(void *device, unsigned int *minor) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetMinorNumber", device, &h);
    if (!rc)
        *minor = (unsigned int)gpus[h->gpu].minor;
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetAttributes_v2(void *device, nvmlDeviceAttributes_t *attrs) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetAttributes_v2", device, &h);
    if (!rc) {
        memset(attrs, 0, sizeof(*attrs));
        attrs->multiprocessorCount = h->sm_count;
        attrs->gpuInstanceSliceCount = h->is_mig ? h->slices : 7;
        attrs->computeInstanceSliceCount = attrs->gpuInstanceSliceCount;
        attrs->memorySizeMB = h->mem_total / MIB;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * NVML: MIG
 * ------------------------------------------------------------------------------------- */

int nvmlDeviceGetMigMode(void *device, unsigned int *current, unsigned int *pending) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetMigMode", device, &h);
    if (!rc) {
        if (h->is_mig || !gpus[h->gpu].mig_supported) {
            rc = NVML_ERROR_NOT_SUPPORTED;
        } else {
            *current = (unsigned int)gpus[h->gpu].mig_mode;
            *pending = (unsigned int)gpus[h->gpu].mig_pending;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetMaxMigDeviceCount(void *device, unsigned int *count) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetMaxMigDeviceCount", device, &h);
    if (!rc) {
        if (!gpus[h->gpu].mig_supported)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else
            *count = MAX_MIGS - 1; /* like an A100: up to 7 instances */
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetMigDeviceHandleByIndex(void *device, unsigned int index, void **mig) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetMigDeviceHandleByIndex", device, &h);
    if (!rc) {
        fake_gpu *g = &gpus[h->gpu];
        if (!g->mig_mode)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else if (index >= (unsigned int)g->nmigs || !g->migs[index].alive)
            rc = NVML_ERROR_NOT_FOUND;
        else
            *mig = &g->migs[index];
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetGpuInstanceId(void *device, unsigned int *id) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetGpuInstanceId", device, &h);
    if (!rc) {
        if (!h->is_mig)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *id = h->gi_id;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetComputeInstanceId(void *device, unsigned int *id) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetComputeInstanceId", device, &h);
    if (!rc) {
        if (!h->is_mig)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *id = h->ci_id;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * NVML: MIG geometry and instances (the driver's rules: a GPU instance occupies the memory
 * slices of its placement, creation overlapping another one or past the profile's instance
 * count is refused, a MIG device exists while its compute instance does, a GPU instance
 * with a compute instance cannot be destroyed, nor a compute instance that runs processes)
 * ------------------------------------------------------------------------------------- */

static fake_gi_profile *profile_by_id(fake_gpu *g, unsigned int id, unsigned int *index) {
    for (unsigned int i = 0; i < MAX_GI_PROFILES; i++)
        if (g->profiles[i].used && g->profiles[i].id == id) {
            if (index)
                *index = i;
            return &g->profiles[i];
        }
    return NULL;
}

static unsigned int gi_mask(const fake_gi_profile *p, unsigned int start) {
    return ((1u << p->mem_slices) - 1u) << start;
}

static int profile_info(void *device, unsigned int index, nvmlGpuInstanceProfileInfo_v2_t *out,
                        const char *fn) {
    fake_handle *h;
    int rc = enter(fn, device, &h);
    if (rc)
        return rc;
    fake_gpu *g = &gpus[h->gpu];
    if (h->is_mig || !g->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= MAX_GI_PROFILES)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->profiles[index].used)
        return NVML_ERROR_NOT_SUPPORTED; /* a profile this GPU does not have */
    fake_gi_profile *p = &g->profiles[index];
    memset(out, 0, sizeof(*out));
    out->id = p->id;
    out->sliceCount = p->slices;
    out->instanceCount = p->count;
    out->multiprocessorCount = p->sms;
    out->copyEngineCount = p->slices;
    out->memorySizeMB = p->mem_mib;
    snprintf(out->name, sizeof(out->name), "MIG %s", p->name);
    return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceProfileInfoV(void *device, unsigned int index,
                                         nvmlGpuInstanceProfileInfo_v2_t *info) {
    pthread_mutex_lock(&lock);
    unsigned int version = info->version;
    int rc = profile_info(device, index, info, "nvmlDeviceGetGpuInstanceProfileInfoV");
    if (!rc)
        info->version = version;
    if (!rc && version != 0x02000098) /* nvmlGpuInstanceProfileInfo_v2 */
        rc = 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetGpuInstanceProfileInfo(void *device, unsigned int index,
                                        nvmlGpuInstanceProfileInfo_t *info) {
    nvmlGpuInstanceProfileInfo_v2_t v2;
    pthread_mutex_lock(&lock);
    int rc = profile_info(device, index, &v2, "nvmlDeviceGetGpuInstanceProfileInfo");
    if (!rc)
        memcpy(info, &v2.id, sizeof(*info)); /* the v1 layout is v2's without version/name */
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetGpuInstancePossiblePlacements_v2(void *device, unsigned int id,
                                                  nvmlPlacement_t *placements,
                                                  unsigned int *count) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetGpuInstancePossiblePlacements_v2", device, &h);
    fake_gi_profile *p = rc ? NULL : profile_by_id(&gpus[h->gpu], id, NULL);
    if (!rc && p == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        unsigned int n = 0;
        for (unsigned int s = 0; s < 32; s++)
            n += (p->starts >> s) & 1u;
        if (placements == NULL) {
            *count = n;
        } else if (*count < n) {
            *count = n;
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            unsigned int k = 0;
            for (unsigned int s = 0; s < 32; s++)
                if ((p->starts >> s) & 1u) {
                    placements[k].start = s;
                    placements[k].size = p->mem_slices;
                    k++;
                }
            *count = n;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceCreateGpuInstanceWithPlacement(void *device, unsigned int id,
                                             const nvmlPlacement_t *placement, void **gi) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceCreateGpuInstanceWithPlacement", device, &h);
    fake_gpu *g = rc ? NULL : &gpus[h->gpu];
    unsigned int index = 0;
    fake_gi_profile *p = rc ? NULL : profile_by_id(g, id, &index);
    if (!rc && (h->is_mig || !g->mig_mode))
        rc = NVML_ERROR_NOT_SUPPORTED;
    else if (!rc && (p == NULL || placement->start >= 32 || !((p->starts >> placement->start) & 1u)
                     || placement->size != p->mem_slices))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        unsigned int want = gi_mask(p, placement->start), taken = 0, same = 0;
        int slot = -1;
        for (int i = 0; i < MAX_GIS; i++) {
            fake_gi *x = &g->gis[i];
            if (!x->used) {
                if (slot < 0)
                    slot = i;
                continue;
            }
            taken |= gi_mask(&g->profiles[x->profile_index], x->start);
            same += x->profile_index == index;
        }
        if ((taken & want) || same >= p->count || slot < 0) {
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        } else {
            /* The lowest free id from 1, as the driver hands them out (ids are reused). */
            unsigned int next = 1;
            for (int again = 1; again;) {
                again = 0;
                for (int i = 0; i < MAX_GIS; i++)
                    if (g->gis[i].used && g->gis[i].id == next) {
                        next++;
                        again = 1;
                    }
            }
            fake_gi *x = &g->gis[slot];
            memset(x, 0, sizeof(*x));
            x->magic = GI_MAGIC;
            x->used = 1;
            x->gpu = h->gpu;
            x->id = next;
            x->profile_index = index;
            x->start = placement->start;
            x->mig = -1;
            *gi = x;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int enter_gi(const char *fn, void *handle, fake_gi **out) {
    note_thread();
    if (!initialised)
        return NVML_ERROR_UNINITIALIZED;
    fake_gi *x = (fake_gi *)handle;
    if (x == NULL || x->magic != GI_MAGIC || !x->used)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpus[x->gpu].lost)
        return NVML_ERROR_GPU_IS_LOST;
    int rc = injected(fn, x->gpu);
    if (rc)
        return rc;
    *out = x;
    return NVML_SUCCESS;
}

int nvmlDeviceGetGpuInstanceById(void *device, unsigned int id, void **gi) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetGpuInstanceById", device, &h);
    if (!rc) {
        rc = NVML_ERROR_NOT_FOUND;
        for (int i = 0; i < MAX_GIS; i++)
            if (gpus[h->gpu].gis[i].used && gpus[h->gpu].gis[i].id == id) {
                *gi = &gpus[h->gpu].gis[i];
                rc = NVML_SUCCESS;
            }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetGpuInstances(void *device, unsigned int id, void **gis, unsigned int *count) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetGpuInstances", device, &h);
    unsigned int index = 0;
    if (!rc && profile_by_id(&gpus[h->gpu], id, &index) == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        unsigned int n = 0;
        for (int i = 0; i < MAX_GIS; i++) {
            fake_gi *x = &gpus[h->gpu].gis[i];
            if (x->used && x->profile_index == index)
                gis[n++] = x; /* callers pass room for the profile's instance count */
        }
        *count = n;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlGpuInstanceGetInfo(void *gi, nvmlGpuInstanceInfo_t *info) {
    fake_gi *x;
    pthread_mutex_lock(&lock);
    int rc = enter_gi("nvmlGpuInstanceGetInfo", gi, &x);
    if (!rc) {
        fake_gi_profile *p = &gpus[x->gpu].profiles[x->profile_index];
        info->device = &gpus[x->gpu].h;
        info->id = x->id;
        info->profileId = p->id;
        info->placement.start = x->start;
        info->placement.size = p->mem_slices;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Compute instance profiles: only the one that takes the whole GPU instance is offered,
 * with profile id = NVML profile index (1-slice index 0, 2: 1, 3: 2, 4: 3, 7: 4). */
static unsigned int ci_index_for(unsigned int slices) {
    switch (slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    case 8: return 5;
    case 6: return 6;
    default: return 99;
    }
}

int nvmlGpuInstanceGetComputeInstanceProfileInfoV(void *gi, unsigned int index,
                                                  unsigned int engine,
                                                  nvmlComputeInstanceProfileInfo_v2_t *info) {
    fake_gi *x;
    pthread_mutex_lock(&lock);
    int rc = enter_gi("nvmlGpuInstanceGetComputeInstanceProfileInfoV", gi, &x);
    if (!rc) {
        fake_gi_profile *p = &gpus[x->gpu].profiles[x->profile_index];
        if (engine != 0 || index != ci_index_for(p->slices)) {
            rc = NVML_ERROR_NOT_SUPPORTED;
        } else {
            unsigned int version = info->version;
            memset(info, 0, sizeof(*info));
            info->version = version;
            info->id = index;
            info->sliceCount = p->slices;
            info->instanceCount = 1;
            info->multiprocessorCount = p->sms;
            snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlGpuInstanceCreateComputeInstance(void *gi, unsigned int id, void **ci) {
    fake_gi *x;
    pthread_mutex_lock(&lock);
    int rc = enter_gi("nvmlGpuInstanceCreateComputeInstance", gi, &x);
    fake_gpu *g = rc ? NULL : &gpus[x->gpu];
    fake_gi_profile *p = rc ? NULL : &g->profiles[x->profile_index];
    if (!rc && id != ci_index_for(p->slices))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!rc && x->mig >= 0)
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES; /* the whole GPU instance is taken */
    if (!rc) {
        int slot = -1;
        for (int m = 0; m < g->nmigs; m++)
            if (!g->migs[m].alive) {
                slot = m;
                break;
            }
        if (slot < 0 && g->nmigs < MAX_MIGS)
            slot = g->nmigs++;
        if (slot < 0) {
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
        } else {
            fake_handle *m = &g->migs[slot];
            memset(m, 0, sizeof(*m));
            m->magic = HANDLE_MAGIC;
            m->is_mig = 1;
            m->alive = 1;
            m->gpu = x->gpu;
            g->created++;
            snprintf(m->uuid, sizeof(m->uuid), "MIG-%04x%04x-dyna-mic0-0000-%012x", x->gpu,
                     x->id, g->created);
            snprintf(m->name, sizeof(m->name), "%.60s MIG %.30s", g->h.name, p->name);
            m->mem_total = p->mem_mib * MIB;
            m->sm_count = p->sms;
            m->slices = p->slices;
            m->gi_id = x->id;
            m->ci_id = 0;
            x->mig = slot;
            *ci = m;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlGpuInstanceGetComputeInstanceById(void *gi, unsigned int id, void **ci) {
    fake_gi *x;
    pthread_mutex_lock(&lock);
    int rc = enter_gi("nvmlGpuInstanceGetComputeInstanceById", gi, &x);
    if (!rc) {
        if (x->mig < 0 || id != gpus[x->gpu].migs[x->mig].ci_id)
            rc = NVML_ERROR_NOT_FOUND;
        else
            *ci = &gpus[x->gpu].migs[x->mig];
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static fake_gi *gi_of(fake_handle *m) {
    for (int i = 0; i < MAX_GIS; i++) {
        fake_gi *x = &gpus[m->gpu].gis[i];
        if (x->used && x->mig >= 0 && &gpus[m->gpu].migs[x->mig] == m)
            return x;
    }
    return NULL;
}

int nvmlComputeInstanceGetInfo_v2(void *ci, nvmlComputeInstanceInfo_t *info) {
    fake_handle *m;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlComputeInstanceGetInfo_v2", ci, &m);
    fake_gi *x = rc ? NULL : gi_of(m);
    if (!rc && x == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (!rc) {
        info->device = &gpus[m->gpu].h;
        info->gpuInstance = x;
        info->id = m->ci_id;
        info->profileId = ci_index_for(m->slices);
        info->placement.start = 0;
        info->placement.size = m->slices;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlComputeInstanceDestroy(void *ci) {
    fake_handle *m;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlComputeInstanceDestroy", ci, &m);
    fake_gi *x = rc ? NULL : gi_of(m);
    if (!rc && x == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else if (!rc && m->nprocs > 0)
        rc = NVML_ERROR_IN_USE;
    if (!rc) {
        m->alive = 0;
        x->mig = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlGpuInstanceDestroy(void *gi) {
    fake_gi *x;
    pthread_mutex_lock(&lock);
    int rc = enter_gi("nvmlGpuInstanceDestroy", gi, &x);
    if (!rc && x->mig >= 0)
        rc = NVML_ERROR_IN_USE;
    if (!rc)
        memset(x, 0, sizeof(*x));
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceSetMigMode(void *device, unsigned int mode, int *activation) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceSetMigMode", device, &h);
    fake_gpu *g = rc ? NULL : &gpus[h->gpu];
    if (!rc && (h->is_mig || !g->mig_supported))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (!rc) {
        int busy = g->h.nprocs > 0;
        for (int i = 0; i < MAX_GIS; i++)
            busy |= g->gis[i].used;
        for (int m = 0; m < g->nmigs; m++)
            busy |= g->migs[m].alive;
        if (busy) {
            rc = NVML_ERROR_IN_USE; /* the driver resets the GPU: nothing may run on it */
        } else {
            g->mig_mode = g->mig_pending = mode ? 1 : 0;
            *activation = NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * NVML: topology
 * ------------------------------------------------------------------------------------- */

int nvmlDeviceGetTopologyCommonAncestor(void *device1, void *device2, int *level) {
    fake_handle *a, *b;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetTopologyCommonAncestor", device1, &a);
    if (!rc)
        rc = enter("nvmlDeviceGetTopologyCommonAncestor", device2, &b);
    if (!rc) {
        if (topo_set[a->gpu][b->gpu])
            *level = topo[a->gpu][b->gpu];
        else if (gpus[a->gpu].numa >= 0 && gpus[a->gpu].numa == gpus[b->gpu].numa)
            *level = NVML_TOPOLOGY_NODE;
        else
            *level = NVML_TOPOLOGY_SYSTEM;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetNvLinkState(void *device, unsigned int link, unsigned int *active) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetNvLinkState", device, &h);
    if (!rc) {
        fake_gpu *g = &gpus[h->gpu];
        if (g->nlinks < 0)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (link >= (unsigned int)g->nlinks)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *active = g->link_remote[link][0] != '\0';
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned int link, nvmlPciInfo_t *pci) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetNvLinkRemotePciInfo_v2", device, &h);
    if (!rc) {
        fake_gpu *g = &gpus[h->gpu];
        if (g->nlinks < 0)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else if (link >= (unsigned int)g->nlinks || !g->link_remote[link][0])
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else {
            memset(pci, 0, sizeof(*pci));
            copy_str(pci->busId, sizeof(pci->busId), g->link_remote[link]);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---------------------------------------------------------------------------------------
 * NVML: monitoring
 * ------------------------------------------------------------------------------------- */

int nvmlDeviceGetUtilizationRates(void *device, nvmlUtilization_t *util) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetUtilizationRates", device, &h);
    if (!rc) {
        if (gpus[h->gpu].mig_mode)
            rc = NVML_ERROR_NOT_SUPPORTED; /* as on real MIG-mode GPUs */
        else {
            util->gpu = gpus[h->gpu].util_gpu;
            util->memory = gpus[h->gpu].util_mem;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetTemperature(void *device, unsigned int sensor, unsigned int *temp) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetTemperature", device, &h);
    if (!rc) {
        if (sensor != 0)
            rc = NVML_ERROR_INVALID_ARGUMENT;
        else
            *temp = gpus[h->gpu].temp;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetPowerUsage(void *device, unsigned int *power) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetPowerUsage", device, &h);
    if (!rc)
        *power = gpus[h->gpu].power_mw;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* R470-era drivers have _v2 only (same layout for the fields read); newer ones both. */
static int running_processes(const char *fn, void *device, unsigned int *count,
                             nvmlProcessInfo_t *infos) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter(fn, device, &h);
    if (!rc) {
        /* A GPU handle sees its own processes and those of its MIG instances. */
        nvmlProcessInfo_t all[MAX_PROCS * (MAX_MIGS + 1)];
        unsigned int n = 0;
        for (int i = 0; i < h->nprocs; i++)
            all[n++] = h->procs[i];
        if (!h->is_mig) {
            fake_gpu *g = &gpus[h->gpu];
            for (int m = 0; m < g->nmigs; m++)
                for (int i = 0; g->migs[m].alive && i < g->migs[m].nprocs; i++)
                    all[n++] = g->migs[m].procs[i];
        }
        if (n == 0) {
            *count = 0;
        } else if (infos == NULL || *count < n) {
            *count = n;
            rc = NVML_ERROR_INSUFFICIENT_SIZE;
        } else {
            memcpy(infos, all, n * sizeof(nvmlProcessInfo_t));
            *count = n;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceGetComputeRunningProcesses_v3(void *device, unsigned int *count,
                                            nvmlProcessInfo_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos);
}

int nvmlDeviceGetComputeRunningProcesses_v2(void *device, unsigned int *count,
                                            nvmlProcessInfo_t *infos) {
    return running_processes("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos);
}

/* ---------------------------------------------------------------------------------------
 * NVML: events
 * ------------------------------------------------------------------------------------- */

int nvmlEventSetCreate(void **set) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = initialised ? injected("nvmlEventSetCreate", -1) : NVML_ERROR_UNINITIALIZED;
    if (!rc) {
        rc = NVML_ERROR_UNKNOWN;
        for (int i = 0; i < MAX_SETS; i++) {
            if (!sets[i].used) {
                memset(&sets[i], 0, sizeof(sets[i]));
                sets[i].used = 1;
                *set = &sets[i];
                rc = NVML_SUCCESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlEventSetFree(void *set) {
    pthread_mutex_lock(&lock);
    note_thread();
    ((event_set *)set)->used = 0;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

int nvmlDeviceGetSupportedEventTypes(void *device, unsigned long long *types) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceGetSupportedEventTypes", device, &h);
    if (!rc)
        *types = gpus[h->gpu].supported_events;
    pthread_mutex_unlock(&lock);
    return rc;
}

int nvmlDeviceRegisterEvents(void *device, unsigned long long types, void *set) {
    fake_handle *h;
    pthread_mutex_lock(&lock);
    int rc = enter("nvmlDeviceRegisterEvents", device, &h);
    if (!rc) {
        if (types & ~gpus[h->gpu].supported_events)
            rc = NVML_ERROR_NOT_SUPPORTED;
        else
            ((event_set *)set)->mask[h->gpu] |= types;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int take_event(event_set *s, nvmlEventData_t *data) {
    for (int i = 0; i < nevents; i++) {
        fake_event *e = &events[i];
        int wanted = e->gpu < 0 || (s->mask[e->gpu] & e->type);
        if (!wanted)
            continue;
        memset(data, 0, sizeof(*data));
        data->device = e->gpu < 0 ? NULL : (void *)&gpus[e->gpu].h;
        data->eventType = e->type;
        data->eventData = e->data;
        data->gpuInstanceId = e->gi;
        data->computeInstanceId = e->ci;
        memmove(&events[i], &events[i + 1], (size_t)(nevents - i - 1) * sizeof(fake_event));
        nevents--;
        return 1;
    }
    return 0;
}

int nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeout_ms) {
    pthread_mutex_lock(&lock);
    note_thread();
    int rc = injected("nvmlEventSetWait_v2", -1);
    if (rc) {
        pthread_mutex_unlock(&lock);
        return rc;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    rc = NVML_ERROR_TIMEOUT;
    for (;;) {
        if (take_event((event_set *)set, data)) {
            rc = NVML_SUCCESS;
            break;
        }
        if (pthread_cond_timedwait(&event_ready, &lock, &deadline) == ETIMEDOUT) {
            if (take_event((event_set *)set, data))
                rc = NVML_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
