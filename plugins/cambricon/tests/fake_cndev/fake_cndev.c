/* A fake Cambricon CNDev (libcndev.so) for the Cambricon plugin's tests, built by them with gcc.
 *
 * It exports the CNDev entry points the plugin calls, with the signatures and struct layouts
 * of cndev.h, and answers from a text file named by FAKE_CNDEV_CONFIG, read again on every
 * call. Lines:
 *
 *   init <code>                 what cndevInit returns (default 0)
 *   fail <function> <code>      that function returns <code>
 *   card key=value ...          one card, in slot order: uuid name mem mem_used cores health
 *                               domain bus dev fn util temp power smlu (1: can cut sMLUs)
 *   profile id=N quota=P mem=B  an sMLU profile (quota percent, memory bytes) of card=S
 *   instance card=S id=N profile=P name=NAME
 *
 * sMLU profiles and instances the plugin creates are appended to the file, so they live as
 * long as the test's file. Every struct's version field must be 5 (6 for sMLU calls), else
 * the call answers CNDEV_ERROR_UNSUPPORTED_API_VERSION, as CNDev does.
 *
 * Compile-time switches: -DNO_SMLU (a library without the sMLU API), -DNO_HANDLES (an old
 * library addressing cards by index, without cndevGetDeviceHandleByIndex), -DOLD_NAMES (the
 * card name under getCardNameStringByDevId), -DOMIT_<function>.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define UUID_SIZE 37
#define NAME_SIZE 100
#define MAX_CARDS 32
#define MAX_ITEMS 128
#define HANDLE_BASE 100

#define CNDEV_SUCCESS 0
#define CNDEV_ERROR_UNSUPPORTED_API_VERSION 3
#define CNDEV_ERROR_INVALID_ARGUMENT 5
#define CNDEV_ERROR_INVALID_DEVICE_ID 6
#define CNDEV_ERROR_INSUFFICIENT_SPACE 9
#define CNDEV_ERROR_NOT_SUPPORTED 10

typedef int cndevRet_t;
typedef int cndevDevice_t;
typedef int cndevMluInstance_t;

typedef struct { int version; unsigned number; } cndevCardInfo_t;
typedef struct { int version; uint8_t uuid[UUID_SIZE]; uint64_t ncsUUID64; } cndevUUID_t;
typedef struct {
    int version;
    int64_t physicalMemoryTotal, physicalMemoryUsed, virtualMemoryTotal, virtualMemoryUsed;
    int64_t channelNumber;
    int64_t channelMemoryUsed[20];
} cndevMemoryInfo_t;
typedef struct { int version; int count; } cndevCardCoreCount_t;
typedef struct { int version; int health; } cndevCardHealthState_t;
typedef struct { int version; int averageCoreUtilization; int coreUtilization[80]; } cndevUtilizationInfo_t;
typedef struct {
    int version;
    unsigned int subsystemId, deviceId;
    uint16_t vendor, subsystemVendor;
    unsigned int domain, bus, device, function;
    const char *physicalSlot;
    int slotID;
} cndevPCIeInfo_t;
typedef struct {
    int version, board, cluster[20], memoryDie[8], chip, airInlet, airOutlet, memory, videoInput, cpu;
} cndevTemperatureInfo_t;
typedef struct {
    int version, usage, cap, usageDecimal, machine, capDecimal;
    uint16_t thermalDesignPower;
} cndevPowerInfo_t;
typedef struct { int version; uint32_t mluQuota; uint64_t memorySize; } cndevSMluSet_t;
typedef struct { int version; int count; int profileId[128]; } cndevSMluProfileIdInfo_t;
typedef struct {
    int version, profileId;
    char name[NAME_SIZE];
    uint32_t totalCapacity, remainCapacity;
    uint32_t mluQuota[2];
    uint64_t memorySize[2];
} cndevSMluProfileInfo_t;
typedef struct {
    int version, profileId, instanceId;
    uint8_t uuid[UUID_SIZE];
    int domain, bus, device, function;
    char profileName[NAME_SIZE], instanceName[NAME_SIZE], devNodeName[NAME_SIZE];
    uint32_t mluQuota[2];
    uint64_t memorySize[2];
    unsigned int reserved[128];
} cndevSMluInfo_t;

struct card {
    char uuid[UUID_SIZE], name[64];
    long long mem, mem_used;
    int cores, health, domain, bus, dev, fn, util, temp, power, smlu;
};
struct profile { int card, id, quota; unsigned long long mem; };
struct instance { int card, id, profile; char name[NAME_SIZE]; };
struct failure { char function[64]; int code; };

static struct card cards[MAX_CARDS];
static int n_cards;
static struct profile profiles[MAX_ITEMS];
static int n_profiles;
static struct instance instances[MAX_ITEMS];
static int n_instances;
static struct failure failures[32];
static int n_failures;
static int init_code;

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static long seen[64];
static int n_seen;

static void note_thread(void) {
    long tid = (long)syscall(SYS_gettid);
    pthread_mutex_lock(&seen_lock);
    int known = 0;
    for (int i = 0; i < n_seen; i++) known |= seen[i] == tid;
    if (!known && n_seen < 64) seen[n_seen++] = tid;
    pthread_mutex_unlock(&seen_lock);
}

int fake_cndev_threads_seen(void) { return n_seen; }
long fake_cndev_last_thread(void) { return n_seen ? seen[n_seen - 1] : 0; }

unsigned long fake_cndev_sizeof(const char *name) {
#define SIZE(t) if (!strcmp(name, #t)) return sizeof(t);
    SIZE(cndevCardInfo_t) SIZE(cndevUUID_t) SIZE(cndevMemoryInfo_t) SIZE(cndevCardCoreCount_t)
    SIZE(cndevCardHealthState_t) SIZE(cndevUtilizationInfo_t) SIZE(cndevPCIeInfo_t)
    SIZE(cndevTemperatureInfo_t) SIZE(cndevPowerInfo_t) SIZE(cndevSMluSet_t)
    SIZE(cndevSMluProfileIdInfo_t) SIZE(cndevSMluProfileInfo_t) SIZE(cndevSMluInfo_t)
#undef SIZE
    return 0;
}

static void card_field(struct card *c, const char *key, const char *value) {
    if (!strcmp(key, "uuid")) { snprintf(c->uuid, sizeof c->uuid, "%s", value); return; }
    if (!strcmp(key, "name")) { snprintf(c->name, sizeof c->name, "%s", value); return; }
    if (!strcmp(key, "mem")) { c->mem = strtoll(value, NULL, 0); return; }
    if (!strcmp(key, "mem_used")) { c->mem_used = strtoll(value, NULL, 0); return; }
    int v = (int)strtol(value, NULL, 0);
#define INT_FIELD(k) if (!strcmp(key, #k)) { c->k = v; return; }
    INT_FIELD(cores) INT_FIELD(health) INT_FIELD(domain) INT_FIELD(bus) INT_FIELD(dev)
    INT_FIELD(fn) INT_FIELD(util) INT_FIELD(temp) INT_FIELD(power) INT_FIELD(smlu)
#undef INT_FIELD
}

static const char *value_of(char *kv, const char *key) {
    size_t n = strlen(key);
    return (!strncmp(kv, key, n) && kv[n] == '=') ? kv + n + 1 : NULL;
}

/* Reads FAKE_CNDEV_CONFIG again; called first by every entry point. */
static void load(void) {
    note_thread();
    n_cards = n_profiles = n_instances = n_failures = 0;
    init_code = 0;
    const char *path = getenv("FAKE_CNDEV_CONFIG");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *save = NULL;
        char *word = strtok_r(line, " \t\r\n", &save);
        if (!word || word[0] == '#') continue;
        if (!strcmp(word, "init")) {
            char *value = strtok_r(NULL, " \t\r\n", &save);
            init_code = value ? atoi(value) : 0;
        } else if (!strcmp(word, "fail") && n_failures < 32) {
            char *fn = strtok_r(NULL, " \t\r\n", &save);
            char *value = strtok_r(NULL, " \t\r\n", &save);
            if (!fn || !value) continue;
            snprintf(failures[n_failures].function, 64, "%s", fn);
            failures[n_failures++].code = atoi(value);
        } else if (!strcmp(word, "card") && n_cards < MAX_CARDS) {
            struct card *c = &cards[n_cards++];
            memset(c, 0, sizeof *c);
            c->health = 1;
            for (char *kv = strtok_r(NULL, " \t\r\n", &save); kv; kv = strtok_r(NULL, " \t\r\n", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq) continue;
                *eq = '\0';
                card_field(c, kv, eq + 1);
            }
        } else if (!strcmp(word, "profile") && n_profiles < MAX_ITEMS) {
            struct profile *p = &profiles[n_profiles++];
            memset(p, 0, sizeof *p);
            for (char *kv = strtok_r(NULL, " \t\r\n", &save); kv; kv = strtok_r(NULL, " \t\r\n", &save)) {
                const char *v;
                if ((v = value_of(kv, "card"))) p->card = atoi(v);
                else if ((v = value_of(kv, "id"))) p->id = atoi(v);
                else if ((v = value_of(kv, "quota"))) p->quota = atoi(v);
                else if ((v = value_of(kv, "mem"))) p->mem = strtoull(v, NULL, 0);
            }
        } else if (!strcmp(word, "instance") && n_instances < MAX_ITEMS) {
            struct instance *in = &instances[n_instances++];
            memset(in, 0, sizeof *in);
            for (char *kv = strtok_r(NULL, " \t\r\n", &save); kv; kv = strtok_r(NULL, " \t\r\n", &save)) {
                const char *v;
                if ((v = value_of(kv, "card"))) in->card = atoi(v);
                else if ((v = value_of(kv, "id"))) in->id = atoi(v);
                else if ((v = value_of(kv, "profile"))) in->profile = atoi(v);
                else if ((v = value_of(kv, "name"))) snprintf(in->name, NAME_SIZE, "%s", v);
            }
        }
    }
    fclose(f);
}

__attribute__((unused)) static void append(const char *text) {
    const char *path = getenv("FAKE_CNDEV_CONFIG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static int failure(const char *function) {
    for (int i = 0; i < n_failures; i++)
        if (!strcmp(failures[i].function, function)) return failures[i].code;
    return 0;
}

#define ENTER(name) load(); { int injected_ = failure(name); if (injected_) return injected_; }

/* The card a handle names: HANDLE_BASE + slot, or the slot itself for old libraries. */
static struct card *card_of(cndevDevice_t handle, int *slot) {
#ifdef NO_HANDLES
    int s = handle;
#else
    int s = handle - HANDLE_BASE;
#endif
    if (s < 0 || s >= n_cards) return NULL;
    if (slot) *slot = s;
    return &cards[s];
}

#define CHECK_VERSION(p, v) if ((p)->version != (v)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;

cndevRet_t cndevInit(int reserved) {
    load();
    (void)reserved;
    return init_code;
}

cndevRet_t cndevRelease(void) { return CNDEV_SUCCESS; }

const char *cndevGetErrorString(cndevRet_t code) {
    (void)code;
    return "fake cndev error";
}

cndevRet_t cndevGetDeviceCount(cndevCardInfo_t *info) {
    ENTER("cndevGetDeviceCount");
    CHECK_VERSION(info, 5);
    info->number = (unsigned)n_cards;
    return CNDEV_SUCCESS;
}

#ifndef NO_HANDLES
cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t *handle) {
    ENTER("cndevGetDeviceHandleByIndex");
    if (index < 0 || index >= n_cards) return CNDEV_ERROR_INVALID_DEVICE_ID;
    *handle = HANDLE_BASE + index;
    return CNDEV_SUCCESS;
}
#endif

#ifndef OMIT_cndevGetUUID
cndevRet_t cndevGetUUID(cndevUUID_t *info, cndevDevice_t handle) {
    ENTER("cndevGetUUID");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    memset(info->uuid, 0, UUID_SIZE);
    memcpy(info->uuid, c->uuid, strnlen(c->uuid, UUID_SIZE - 1));
    return CNDEV_SUCCESS;
}
#endif

#ifndef OLD_NAMES
const char *cndevGetCardNameStringByDevId(cndevDevice_t handle) {
#else
const char *getCardNameStringByDevId(cndevDevice_t handle) {
#endif
    load();
    struct card *c = card_of(handle, NULL);
    return c ? c->name : "Unknown";
}

cndevRet_t cndevGetMemoryUsage(cndevMemoryInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetMemoryUsage");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->physicalMemoryTotal = c->mem;
    info->physicalMemoryUsed = c->mem_used;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetCoreCount(cndevCardCoreCount_t *info, cndevDevice_t handle) {
    ENTER("cndevGetCoreCount");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->count = c->cores;
    return CNDEV_SUCCESS;
}

#ifndef OMIT_cndevGetCardHealthState
cndevRet_t cndevGetCardHealthState(cndevCardHealthState_t *info, cndevDevice_t handle) {
    ENTER("cndevGetCardHealthState");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->health = c->health;
    return CNDEV_SUCCESS;
}
#endif

cndevRet_t cndevGetDeviceUtilizationInfo(cndevUtilizationInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetDeviceUtilizationInfo");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->averageCoreUtilization = c->util;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetPCIeInfo(cndevPCIeInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetPCIeInfo");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->vendor = 0xcabc;
    info->domain = (unsigned)c->domain;
    info->bus = (unsigned)c->bus;
    info->device = (unsigned)c->dev;
    info->function = (unsigned)c->fn;
    info->physicalSlot = "fake-slot";
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetTemperatureInfo(cndevTemperatureInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetTemperatureInfo");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->board = c->temp;
    info->chip = c->temp + 5;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetPowerInfo(cndevPowerInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetPowerInfo");
    CHECK_VERSION(info, 5);
    struct card *c = card_of(handle, NULL);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    info->usage = c->power;
    info->cap = 150;
    return CNDEV_SUCCESS;
}

/* --- sMLU ------------------------------------------------------------------------------ */
#ifndef NO_SMLU

cndevRet_t cndevGetSMluProfileIdInfo(cndevSMluProfileIdInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetSMluProfileIdInfo");
    CHECK_VERSION(info, 6);
    int slot = 0;
    struct card *c = card_of(handle, &slot);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    if (!c->smlu) return CNDEV_ERROR_NOT_SUPPORTED;
    info->count = 0;
    for (int i = 0; i < n_profiles; i++)
        if (profiles[i].card == slot) info->profileId[info->count++] = profiles[i].id;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetSMluProfileInfo(cndevSMluProfileInfo_t *info, int profile, cndevDevice_t handle) {
    ENTER("cndevGetSMluProfileInfo");
    CHECK_VERSION(info, 6);
    int slot = 0;
    if (!card_of(handle, &slot)) return CNDEV_ERROR_INVALID_DEVICE_ID;
    for (int i = 0; i < n_profiles; i++) {
        struct profile *p = &profiles[i];
        if (p->card != slot || p->id != profile) continue;
        info->profileId = p->id;
        snprintf(info->name, NAME_SIZE, "%dq.%llum", p->quota, p->mem >> 20);
        info->mluQuota[0] = (uint32_t)p->quota;
        info->memorySize[0] = p->mem;
        info->totalCapacity = 16;
        info->remainCapacity = 16;
        return CNDEV_SUCCESS;
    }
    return CNDEV_ERROR_INVALID_ARGUMENT;
}

cndevRet_t cndevCreateSMluProfileInfo(cndevSMluSet_t *set, int *profile, cndevDevice_t handle) {
    ENTER("cndevCreateSMluProfileInfo");
    CHECK_VERSION(set, 6);
    int slot = 0;
    struct card *c = card_of(handle, &slot);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    if (!c->smlu) return CNDEV_ERROR_NOT_SUPPORTED;
    if (set->mluQuota < 1 || set->mluQuota > 100 || set->memorySize == 0)
        return CNDEV_ERROR_INVALID_ARGUMENT;
    int id = 0;
    for (int i = 0; i < n_profiles; i++)
        if (profiles[i].card == slot && profiles[i].id >= id) id = profiles[i].id + 1;
    char text[160];
    snprintf(text, sizeof text, "profile card=%d id=%d quota=%u mem=%llu\n", slot, id,
             set->mluQuota, (unsigned long long)set->memorySize);
    append(text);
    *profile = id;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevCreateSMluInstanceByProfileId(cndevMluInstance_t *mi, unsigned int profile,
                                              cndevDevice_t handle, char *name) {
    ENTER("cndevCreateSMluInstanceByProfileId");
    int slot = 0;
    struct card *c = card_of(handle, &slot);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    if (!c->smlu) return CNDEV_ERROR_NOT_SUPPORTED;
    int known = 0;
    for (int i = 0; i < n_profiles; i++) known |= profiles[i].card == slot && profiles[i].id == (int)profile;
    if (!known || !name || !name[0] || strchr(name, ' ')) return CNDEV_ERROR_INVALID_ARGUMENT;
    int id = 1;
    for (int i = 0; i < n_instances; i++)
        if (instances[i].card == slot && instances[i].id >= id) id = instances[i].id + 1;
    char text[256];
    snprintf(text, sizeof text, "instance card=%d id=%d profile=%u name=%s\n", slot, id, profile, name);
    append(text);
    *mi = (id << 8) | slot;
    return CNDEV_SUCCESS;
}

/* Drops the "instance card=<slot> id=<id>" line from the table file (the fake's state). */
static cndevRet_t remove_instance(int slot, int id) {
    int found = 0;
    for (int i = 0; i < n_instances; i++) found |= instances[i].card == slot && instances[i].id == id;
    if (!found) return CNDEV_ERROR_INVALID_ARGUMENT;
    const char *path = getenv("FAKE_CNDEV_CONFIG");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return CNDEV_ERROR_INVALID_ARGUMENT;
    static char kept[1 << 20];
    size_t used = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        int card = -1, iid = -1;
        const char *c = strstr(line, " card="), *n = strstr(line, " id=");
        if (!strncmp(line, "instance ", 9) && c && n) {
            card = atoi(c + 6);
            iid = atoi(n + 4);
        }
        if (card == slot && iid == id) continue;
        size_t len = strlen(line);
        if (used + len >= sizeof kept) break;
        memcpy(kept + used, line, len);
        used += len;
    }
    fclose(f);
    f = fopen(path, "w");
    if (!f) return CNDEV_ERROR_INVALID_ARGUMENT;
    fwrite(kept, 1, used, f);
    fclose(f);
    return CNDEV_SUCCESS;
}

/* The handle cndevCreateSMluInstanceByProfileId returned: (instance id << 8) | slot here. */
cndevRet_t cndevDestroySMluInstanceByHandle(cndevMluInstance_t mi) {
    ENTER("cndevDestroySMluInstanceByHandle");
    return remove_instance(mi & 0xff, mi >> 8);
}

#ifndef NO_DESTROY_BY_NAME
cndevRet_t cndevDestroySMluInstanceByInstanceName(cndevDevice_t handle, char *name) {
    ENTER("cndevDestroySMluInstanceByInstanceName");
    int slot = 0;
    struct card *c = card_of(handle, &slot);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    for (int i = 0; i < n_instances; i++)
        if (instances[i].card == slot && name && !strcmp(instances[i].name, name))
            return remove_instance(slot, instances[i].id);
    return CNDEV_ERROR_INVALID_ARGUMENT;
}
#endif

cndevRet_t cndevGetAllSMluInstanceInfo(int *count, cndevSMluInfo_t *info, cndevDevice_t handle) {
    ENTER("cndevGetAllSMluInstanceInfo");
    int slot = 0;
    struct card *c = card_of(handle, &slot);
    if (!c) return CNDEV_ERROR_INVALID_DEVICE_ID;
    if (!c->smlu) return CNDEV_ERROR_NOT_SUPPORTED;
    int n = 0;
    for (int i = 0; i < n_instances; i++) n += instances[i].card == slot;
    if (n > *count) {
        *count = n;
        return CNDEV_ERROR_INSUFFICIENT_SPACE;
    }
    int k = 0;
    for (int i = 0; i < n_instances; i++) {
        struct instance *in = &instances[i];
        if (in->card != slot) continue;
        cndevSMluInfo_t *out = &info[k++];
        if (out->version != 6) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
        out->instanceId = in->id;
        out->profileId = in->profile;
        snprintf(out->instanceName, NAME_SIZE, "%s", in->name);
        snprintf(out->devNodeName, NAME_SIZE, "/dev/cambricon-caps/cap_dev%d_mi%d", slot, in->id);
        snprintf((char *)out->uuid, UUID_SIZE, "SMLU-%02d%02d-0000", slot, in->id);
        for (int j = 0; j < n_profiles; j++) {
            if (profiles[j].card == slot && profiles[j].id == in->profile) {
                out->mluQuota[0] = (uint32_t)profiles[j].quota;
                out->memorySize[0] = profiles[j].mem;
            }
        }
    }
    *count = k;
    return CNDEV_SUCCESS;
}

#endif /* NO_SMLU */
