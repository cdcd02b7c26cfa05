/* A fake of T-Head's HGML (libhgml.so): NVML's C API under hgml names.
 *
 * PPUs come from the table named by FAKE_HGML_TABLE; the NVML-shaped calls and their keys
 * are fake_nvml_shaped.h's. HGML's own key: ecc_ue=<uncorrected volatile ECC errors>.
 * Compile with -DFAKE_OMIT_ECC to leave hgmlDeviceGetTotalEccErrors out, or with
 * -DFAKE_OMIT_NAME to leave a required call out, or -DFAKE_OMIT_MIG for an HGML without MIG.
 */
#define FAKE_API(name) hgml##name
#define TABLE "FAKE_HGML_TABLE"
#define FAKE_DRIVER "1.4.0"
#define FAKE_UUID "PPU-unknown"
#define FAKE_NAME "PPU-ZW810E"
#include "fake_nvml_shaped.h"

#ifndef FAKE_OMIT_ECC
int hgmlDeviceGetTotalEccErrors(void *h, unsigned int type, unsigned int counter,
                                unsigned long long *count) {
    const fake_row *d = fake_dev(h);
    if (!d || !count || type != 1 || counter != 0) return INVALID_ARGUMENT;
    *count = (unsigned long long)fake_int(d, "ecc_ue", 0);
    return SUCCESS;
}
#endif

#ifndef FAKE_OMIT_MIG
/* HGML's MIG calls: NVML's MIG API under hgml names, with GPU instances (GIs)
 * and their one compute instance (CI) kept in a state file, so they outlive a node agent
 * "restart" (a new plugin host in the same test) and no test sees another's.
 *
 * Table keys per PPU:
 *   mig=1                  MIG mode current and pending (default 0)
 *   mig_profiles=P,P,...   each P is idx/id/name/slices/size/count/memMB/start+start+...
 *                          (profile index, creation id, name without HGML's "MIG " prefix,
 *                          compute slices, memory slices a placement spans, instances at
 *                          most, memory, legal starts)
 *   busy_gi=<id>           destroying that GI's compute instance answers IN_USE (a process)
 * Environment:
 *   FAKE_HGML_MIG_STATE    the state file: one line per GI, "ppu gi profile start size ci"
 *   FAKE_HGML_CAPS         the driver's capability tree the fake writes with each instance:
 *                          ppu<N>/mig/gi<G>/access and .../gi<G>/ci<C>/access, holding
 *                          "DeviceFileMinor: <minor>" (GI 229632 + 256 N + 2 G, CI one more)
 *   FAKE_HGML_CAPS_DEV     where the fake makes each capability's alixpu-cap<minor> node
 * Creation refuses what the hardware refuses: MIG off, an unknown profile or start, a size
 * not the profile's, an overlap with a live GI, a profile at its instance count.
 */
#include <sys/stat.h>
#include <unistd.h>

#define NOT_FOUND 6
#define INSUFFICIENT_SIZE 7
#define IN_USE 19
#define INSUFFICIENT_RESOURCES 23
#define MAX_PROFILES 8
#define MAX_STARTS 16
#define MAX_GIS 64
#define CAP_BASE 229632

typedef struct { unsigned int start, size; } fake_placement_t;
typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} fake_gi_profile_v2_t;
typedef struct {
    void *device;
    unsigned int id, profileId;
    fake_placement_t placement;
} fake_gi_info_t;
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} fake_ci_profile_t;
typedef struct {
    void *device, *gpuInstance;
    unsigned int id, profileId;
    fake_placement_t placement;
} fake_ci_info_t;

typedef struct {
    int idx, id, slices, size, count, mem, nstarts;
    int starts[MAX_STARTS];
    char name[64];
} fake_profile;
typedef struct { int ppu, gi, profile, start, size, ci; } fake_gi;

static fake_gi fake_gis[MAX_GIS];
static int fake_ngis;

static int fake_profiles(const fake_row *d, fake_profile *out) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", fake_str(d, "mig_profiles", ""));
    int n = 0;
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p && n < MAX_PROFILES; p = strtok_r(NULL, ",", &save)) {
        fake_profile *f = &out[n];
        char starts[256];
        if (sscanf(p, "%d/%d/%63[^/]/%d/%d/%d/%d/%255s", &f->idx, &f->id, f->name, &f->slices,
                   &f->size, &f->count, &f->mem, starts) != 8)
            continue;
        f->nstarts = 0;
        char *s2 = NULL;
        for (char *s = strtok_r(starts, "+", &s2); s && f->nstarts < MAX_STARTS;
             s = strtok_r(NULL, "+", &s2))
            f->starts[f->nstarts++] = atoi(s);
        n++;
    }
    return n;
}

static const fake_profile *fake_profile_by(const fake_profile *all, int n, int id, int by_idx) {
    for (int i = 0; i < n; i++)
        if ((by_idx ? all[i].idx : all[i].id) == id) return &all[i];
    return NULL;
}

static void fake_state_load(void) {
    fake_ngis = 0;
    const char *path = getenv("FAKE_HGML_MIG_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    fake_gi g;
    while (fake_ngis < MAX_GIS &&
           fscanf(f, "%d %d %d %d %d %d", &g.ppu, &g.gi, &g.profile, &g.start, &g.size, &g.ci) == 6)
        fake_gis[fake_ngis++] = g;
    fclose(f);
}

static void fake_state_save(void) {
    const char *path = getenv("FAKE_HGML_MIG_STATE");
    if (!path) return;
    FILE *f = fopen(path, "w");
    if (!f) return;
    for (int i = 0; i < fake_ngis; i++)
        fprintf(f, "%d %d %d %d %d %d\n", fake_gis[i].ppu, fake_gis[i].gi, fake_gis[i].profile,
                fake_gis[i].start, fake_gis[i].size, fake_gis[i].ci);
    fclose(f);
}

static void fake_mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') { *p = '\0'; mkdir(buf, 0755); *p = '/'; }
    mkdir(buf, 0755);
}

/* The capability of a GI (ci < 0) or of its CI: its access file and device node. */
static void fake_cap(int ppu, int gi, int ci, int make) {
    const char *root = getenv("FAKE_HGML_CAPS");
    const char *dev = getenv("FAKE_HGML_CAPS_DEV");
    if (!root) return;
    char dir[1024], file[1100], node[1100];
    int minor = CAP_BASE + 256 * ppu + 2 * gi + (ci >= 0 ? 1 : 0);
    if (ci >= 0) snprintf(dir, sizeof dir, "%s/ppu%d/mig/gi%d/ci%d", root, ppu, gi, ci);
    else snprintf(dir, sizeof dir, "%s/ppu%d/mig/gi%d", root, ppu, gi);
    snprintf(file, sizeof file, "%s/access", dir);
    if (dev) snprintf(node, sizeof node, "%s/alixpu-cap%d", dev, minor);
    if (make) {
        fake_mkdirs(dir);
        FILE *f = fopen(file, "w");
        if (f) { fprintf(f, "DeviceFileMinor: %d\nDeviceFileMode: 292\n", minor); fclose(f); }
        if (dev) { fake_mkdirs(dev); FILE *n = fopen(node, "w"); if (n) fclose(n); }
    } else {
        unlink(file);
        rmdir(dir);
        if (dev) unlink(node);
    }
}

static int fake_ppu_of(void *h) { return (int)((uintptr_t)h) - 1; }
static void *fake_gi_handle(int ppu, int gi) { return (void *)(uintptr_t)(0x100000 * (ppu + 1) + gi); }
static void *fake_ci_handle(int ppu, int gi, int ci) {
    return (void *)(uintptr_t)(0x100000 * (ppu + 1) + 0x1000 + 16 * gi + ci);
}
static fake_gi *fake_find_gi(int ppu, int gi) {
    for (int i = 0; i < fake_ngis; i++)
        if (fake_gis[i].ppu == ppu && fake_gis[i].gi == gi) return &fake_gis[i];
    return NULL;
}
static fake_gi *fake_gi_of(void *handle) {
    uintptr_t v = (uintptr_t)handle;
    fake_state_load();
    return fake_find_gi((int)(v / 0x100000) - 1, (int)(v % 0x100000));
}
static fake_gi *fake_gi_of_ci(void *handle) {
    uintptr_t v = (uintptr_t)handle % 0x100000;
    fake_state_load();
    if (v < 0x1000) return NULL;
    fake_gi *g = fake_find_gi((int)((uintptr_t)handle / 0x100000) - 1, (int)((v - 0x1000) / 16));
    return g && g->ci == (int)((v - 0x1000) % 16) ? g : NULL;
}

int hgmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending) {
    const fake_row *d = fake_dev(h);
    if (!d || !current || !pending) return INVALID_ARGUMENT;
    *current = *pending = (unsigned int)fake_int(d, "mig", 0);
    return SUCCESS;
}

int hgmlDeviceGetGpuInstanceProfileInfoV(void *h, unsigned int index, fake_gi_profile_v2_t *info) {
    const fake_row *d = fake_dev(h);
    if (!d || !info) return INVALID_ARGUMENT;
    if (info->version != ((unsigned int)sizeof *info | (2u << 24))) return INVALID_ARGUMENT;
    fake_profile all[MAX_PROFILES];
    const fake_profile *p = fake_profile_by(all, fake_profiles(d, all), (int)index, 1);
    if (!p) return NOT_SUPPORTED;
    unsigned int version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = (unsigned int)p->id;
    info->sliceCount = (unsigned int)p->slices;
    info->instanceCount = (unsigned int)p->count;
    info->multiprocessorCount = (unsigned int)(8 * p->slices);
    info->memorySizeMB = (unsigned long long)p->mem;
    snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    return SUCCESS;
}

int hgmlDeviceGetGpuInstancePossiblePlacements_v2(void *h, unsigned int id, fake_placement_t *out,
                                                  unsigned int *count) {
    const fake_row *d = fake_dev(h);
    if (!d || !count) return INVALID_ARGUMENT;
    fake_profile all[MAX_PROFILES];
    const fake_profile *p = fake_profile_by(all, fake_profiles(d, all), (int)id, 0);
    if (!p) return INVALID_ARGUMENT;
    if (!out) { *count = (unsigned int)p->nstarts; return SUCCESS; }
    if (*count < (unsigned int)p->nstarts) { *count = (unsigned int)p->nstarts; return INSUFFICIENT_SIZE; }
    for (int i = 0; i < p->nstarts; i++) {
        out[i].start = (unsigned int)p->starts[i];
        out[i].size = (unsigned int)p->size;
    }
    *count = (unsigned int)p->nstarts;
    return SUCCESS;
}

int hgmlDeviceCreateGpuInstanceWithPlacement(void *h, unsigned int id, const fake_placement_t *pl,
                                             void **gi) {
    const fake_row *d = fake_dev(h);
    if (!d || !pl || !gi) return INVALID_ARGUMENT;
    if (!fake_int(d, "mig", 0)) return NOT_SUPPORTED;
    fake_profile all[MAX_PROFILES];
    const fake_profile *p = fake_profile_by(all, fake_profiles(d, all), (int)id, 0);
    if (!p || pl->size != (unsigned int)p->size) return INVALID_ARGUMENT;
    int legal = 0;
    for (int i = 0; i < p->nstarts; i++) legal |= p->starts[i] == (int)pl->start;
    if (!legal) return INVALID_ARGUMENT;
    int ppu = fake_ppu_of(h), same = 0, used[MAX_GIS + 2] = {0};
    fake_state_load();
    for (int i = 0; i < fake_ngis; i++) {
        fake_gi *g = &fake_gis[i];
        if (g->ppu != ppu) continue;
        if (g->gi <= MAX_GIS) used[g->gi] = 1;
        same += g->profile == p->id;
        if ((int)pl->start < g->start + g->size && g->start < (int)(pl->start + pl->size))
            return INSUFFICIENT_RESOURCES;
    }
    if (same >= p->count || fake_ngis >= MAX_GIS) return INSUFFICIENT_RESOURCES;
    int next = 1;
    while (used[next]) next++;  /* the lowest free id: ids are reused, as NVML's are */
    fake_gis[fake_ngis++] = (fake_gi){ppu, next, p->id, (int)pl->start, p->size, -1};
    fake_state_save();
    fake_cap(ppu, next, -1, 1);
    *gi = fake_gi_handle(ppu, next);
    return SUCCESS;
}

int hgmlGpuInstanceGetInfo(void *gi, fake_gi_info_t *info) {
    fake_gi *g = fake_gi_of(gi);
    if (!g || !info) return INVALID_ARGUMENT;
    info->device = (void *)(uintptr_t)(g->ppu + 1);
    info->id = (unsigned int)g->gi;
    info->profileId = (unsigned int)g->profile;
    info->placement.start = (unsigned int)g->start;
    info->placement.size = (unsigned int)g->size;
    return SUCCESS;
}

int hgmlDeviceGetGpuInstanceById(void *h, unsigned int id, void **gi) {
    if (!fake_dev(h) || !gi) return INVALID_ARGUMENT;
    fake_state_load();
    if (!fake_find_gi(fake_ppu_of(h), (int)id)) return NOT_FOUND;
    *gi = fake_gi_handle(fake_ppu_of(h), (int)id);
    return SUCCESS;
}

int hgmlDeviceGetGpuInstances(void *h, unsigned int id, void **out, unsigned int *count) {
    if (!fake_dev(h) || !out || !count) return INVALID_ARGUMENT;
    fake_state_load();
    unsigned int n = 0;
    for (int i = 0; i < fake_ngis; i++) {
        fake_gi *g = &fake_gis[i];
        if (g->ppu != fake_ppu_of(h) || g->profile != (int)id) continue;
        if (n >= *count) return INSUFFICIENT_SIZE;
        out[n++] = fake_gi_handle(g->ppu, g->gi);
    }
    *count = n;
    return SUCCESS;
}

/* Compute instance profile indices are NVML's NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE. */
static int fake_ci_index(int slices) {
    switch (slices) {
    case 1: return 0; case 2: return 1; case 3: return 2; case 4: return 3;
    case 7: return 4; case 8: return 5; case 6: return 6;
    default: return -1;
    }
}

int hgmlGpuInstanceGetComputeInstanceProfileInfo(void *gi, unsigned int index, unsigned int engine,
                                                 fake_ci_profile_t *info) {
    fake_gi *g = fake_gi_of(gi);
    if (!g || !info || engine != 0) return INVALID_ARGUMENT;
    const fake_row *d = fake_dev((void *)(uintptr_t)(g->ppu + 1));
    fake_profile all[MAX_PROFILES];
    const fake_profile *p = d ? fake_profile_by(all, fake_profiles(d, all), g->profile, 0) : NULL;
    if (!p || fake_ci_index(p->slices) != (int)index) return NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = 100 + index;
    info->sliceCount = (unsigned int)p->slices;
    info->instanceCount = 1;
    return SUCCESS;
}

int hgmlGpuInstanceCreateComputeInstance(void *gi, unsigned int id, void **ci) {
    fake_gi *g = fake_gi_of(gi);
    if (!g || !ci || id < 100) return INVALID_ARGUMENT;
    if (g->ci >= 0) return INSUFFICIENT_RESOURCES;  /* one CI filling the GI */
    g->ci = 0;
    fake_state_save();
    fake_cap(g->ppu, g->gi, 0, 1);
    *ci = fake_ci_handle(g->ppu, g->gi, 0);
    return SUCCESS;
}

int hgmlComputeInstanceGetInfo_v2(void *ci, fake_ci_info_t *info) {
    fake_gi *g = fake_gi_of_ci(ci);
    if (!g || !info) return INVALID_ARGUMENT;
    info->device = (void *)(uintptr_t)(g->ppu + 1);
    info->gpuInstance = fake_gi_handle(g->ppu, g->gi);
    info->id = (unsigned int)g->ci;
    info->profileId = 100;
    info->placement.start = 0;
    info->placement.size = (unsigned int)g->size;
    return SUCCESS;
}

int hgmlGpuInstanceGetComputeInstanceById(void *gi, unsigned int id, void **ci) {
    fake_gi *g = fake_gi_of(gi);
    if (!g || !ci) return INVALID_ARGUMENT;
    if (g->ci != (int)id) return NOT_FOUND;
    *ci = fake_ci_handle(g->ppu, g->gi, g->ci);
    return SUCCESS;
}

int hgmlComputeInstanceDestroy(void *ci) {
    fake_gi *g = fake_gi_of_ci(ci);
    if (!g) return INVALID_ARGUMENT;
    const fake_row *d = fake_dev((void *)(uintptr_t)(g->ppu + 1));
    if (d && fake_int(d, "busy_gi", -1) == g->gi) return IN_USE;
    fake_cap(g->ppu, g->gi, g->ci, 0);
    g->ci = -1;
    fake_state_save();
    return SUCCESS;
}

int hgmlGpuInstanceDestroy(void *gi) {
    fake_gi *g = fake_gi_of(gi);
    if (!g) return INVALID_ARGUMENT;
    if (g->ci >= 0) return IN_USE;  /* HGML: destroy the compute instance first */
    fake_cap(g->ppu, g->gi, -1, 0);
    *g = fake_gis[--fake_ngis];
    fake_state_save();
    return SUCCESS;
}
#endif /* FAKE_OMIT_MIG */
