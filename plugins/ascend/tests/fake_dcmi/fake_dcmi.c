/* A fake Huawei DCMI (libdcmi.so) for the Ascend plugin's tests, compiled by them with gcc.
 *
 * It exports the DCMI entry points the plugin calls, with the signatures and struct layouts
 * of dcmi_interface_api.h, and answers from a small text file named by FAKE_DCMI_CONFIG.
 * The file is read again on every call, so a test changes a chip's health or readings by
 * rewriting it. Lines:
 *
 *   init <code>                  what dcmi_init returns (default 0)
 *   initv2 <code>                what dcmiv2_init returns (default 0)
 *   fail <function> <code>       that function returns <code> (e.g. -8255, NOT_SUPPORT)
 *   chip key=value ...           one unit of a card: card device logic phy type name ctype
 *                                ver npu aicore hbm hbm_used ddr ddr_util health die
 *                                domain bus slot fn temp power util ecc sbe dbe
 *
 * Compile-time switches choose what the library exports: -DNO_V1 (a V2-only library),
 * -DNO_V2 (a V1-only library), -DOMIT_<function> to leave one function out, and
 * -DLEGACY_CARD_LIST to export the 2021 name dcmi_get_card_num_list.
 * fake_dcmi_threads_seen() tells how many OS threads have called into the library.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_CHIP_NAME_LEN 32
#define DIE_ID_COUNT 5
#define MAX_CHIPS 64
#define NOT_SUPPORT (-8255)
#define INVALID_DEVICE_ID (-8007)
#define INVALID_PARAMETER (-8001)

struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_chip_info_v2 {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
    unsigned char npu_name[MAX_CHIP_NAME_LEN];
};

struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_die_id {
    unsigned int soc_die[DIE_ID_COUNT];
};

struct dcmi_ecc_info {
    int enable_flag;
    unsigned int single_bit_error_cnt;
    unsigned int double_bit_error_cnt;
    unsigned int total_single_bit_error_cnt;
    unsigned int total_double_bit_error_cnt;
    unsigned int single_bit_isolated_pages_cnt;
    unsigned int double_bit_isolated_pages_cnt;
};

/* The header documents 64 bytes for this one; the plugin's ctypes layouts are checked
 * against the compiler's sizes through fake_dcmi_sizeof(). */
_Static_assert(sizeof(struct dcmi_pcie_info_all) == 64, "pcie info all is 64 bytes");

unsigned long fake_dcmi_sizeof(const char *name) {
    if (!strcmp(name, "dcmi_chip_info")) return sizeof(struct dcmi_chip_info);
    if (!strcmp(name, "dcmi_chip_info_v2")) return sizeof(struct dcmi_chip_info_v2);
    if (!strcmp(name, "dcmi_hbm_info")) return sizeof(struct dcmi_hbm_info);
    if (!strcmp(name, "dcmi_get_memory_info_stru")) return sizeof(struct dcmi_get_memory_info_stru);
    if (!strcmp(name, "dcmi_pcie_info_all")) return sizeof(struct dcmi_pcie_info_all);
    if (!strcmp(name, "dcmi_die_id")) return sizeof(struct dcmi_die_id);
    if (!strcmp(name, "dcmi_ecc_info")) return sizeof(struct dcmi_ecc_info);
    return 0;
}

struct chip {
    int card, device, logic, phy, type, aicore, health, domain, bus, slot, fn;
    int temp, power, util, ecc, sbe, dbe, ddr_util;
    unsigned long long hbm, hbm_used, ddr;
    unsigned int die[DIE_ID_COUNT];
    char name[MAX_CHIP_NAME_LEN], ctype[MAX_CHIP_NAME_LEN], ver[MAX_CHIP_NAME_LEN];
    char npu[MAX_CHIP_NAME_LEN];
};

struct failure {
    char function[64];
    int code;
};

static struct chip chips[MAX_CHIPS];
static int n_chips;
static struct failure failures[32];
static int n_failures;
static int init_code, initv2_code;

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

int fake_dcmi_threads_seen(void) { return n_seen; }
long fake_dcmi_last_thread(void) { return n_seen ? seen[n_seen - 1] : 0; }

static void set_field(struct chip *c, const char *key, const char *value) {
    long v = strtol(value, NULL, 0);
#define INT_FIELD(k) if (!strcmp(key, #k)) { c->k = (int)v; return; }
    INT_FIELD(card) INT_FIELD(device) INT_FIELD(logic) INT_FIELD(phy) INT_FIELD(type)
    INT_FIELD(aicore) INT_FIELD(health) INT_FIELD(domain) INT_FIELD(bus) INT_FIELD(slot)
    INT_FIELD(fn) INT_FIELD(temp) INT_FIELD(power) INT_FIELD(util) INT_FIELD(ecc)
    INT_FIELD(sbe) INT_FIELD(dbe) INT_FIELD(ddr_util)
#undef INT_FIELD
    if (!strcmp(key, "hbm")) { c->hbm = strtoull(value, NULL, 0); return; }
    if (!strcmp(key, "hbm_used")) { c->hbm_used = strtoull(value, NULL, 0); return; }
    if (!strcmp(key, "ddr")) { c->ddr = strtoull(value, NULL, 0); return; }
    if (!strcmp(key, "name")) { snprintf(c->name, sizeof c->name, "%s", value); return; }
    if (!strcmp(key, "ctype")) { snprintf(c->ctype, sizeof c->ctype, "%s", value); return; }
    if (!strcmp(key, "ver")) { snprintf(c->ver, sizeof c->ver, "%s", value); return; }
    if (!strcmp(key, "npu")) { snprintf(c->npu, sizeof c->npu, "%s", value); return; }
    if (!strcmp(key, "die")) {
        char copy[128];
        snprintf(copy, sizeof copy, "%s", value);
        char *save = NULL;
        char *tok = strtok_r(copy, ",", &save);
        for (int i = 0; i < DIE_ID_COUNT; i++) {
            c->die[i] = tok ? (unsigned int)strtoul(tok, NULL, 0) : 0;
            tok = tok ? strtok_r(NULL, ",", &save) : NULL;
        }
    }
}

/* Reads FAKE_DCMI_CONFIG again; called first by every entry point. */
static void load(void) {
    note_thread();
    n_chips = 0;
    n_failures = 0;
    init_code = 0;
    initv2_code = 0;
    const char *path = getenv("FAKE_DCMI_CONFIG");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *save = NULL;
        char *word = strtok_r(line, " \t\r\n", &save);
        if (!word || word[0] == '#') continue;
        if (!strcmp(word, "init") || !strcmp(word, "initv2")) {
            char *value = strtok_r(NULL, " \t\r\n", &save);
            int code = value ? atoi(value) : 0;
            if (!strcmp(word, "init")) init_code = code; else initv2_code = code;
        } else if (!strcmp(word, "fail") && n_failures < 32) {
            char *fn = strtok_r(NULL, " \t\r\n", &save);
            char *value = strtok_r(NULL, " \t\r\n", &save);
            if (!fn || !value) continue;
            snprintf(failures[n_failures].function, 64, "%s", fn);
            failures[n_failures++].code = atoi(value);
        } else if (!strcmp(word, "chip") && n_chips < MAX_CHIPS) {
            struct chip *c = &chips[n_chips++];
            memset(c, 0, sizeof *c);
            snprintf(c->ctype, sizeof c->ctype, "Ascend");
            for (char *kv = strtok_r(NULL, " \t\r\n", &save); kv;
                 kv = strtok_r(NULL, " \t\r\n", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq) continue;
                *eq = '\0';
                set_field(c, kv, eq + 1);
            }
        }
    }
    fclose(f);
}

static int failure(const char *function) {
    for (int i = 0; i < n_failures; i++)
        if (!strcmp(failures[i].function, function)) return failures[i].code;
    return 0;
}

#define ENTER(name) load(); { int injected_ = failure(name); if (injected_) return injected_; }

__attribute__((unused)) static struct chip *by_card(int card, int device) {
    for (int i = 0; i < n_chips; i++)
        if (chips[i].card == card && chips[i].device == device) return &chips[i];
    return NULL;
}

static struct chip *by_logic(int logic) {
    for (int i = 0; i < n_chips; i++)
        if (chips[i].logic == logic && chips[i].type == 0) return &chips[i];
    return NULL;
}

static struct chip *by_phy(unsigned int phy) {
    for (int i = 0; i < n_chips; i++)
        if ((unsigned int)chips[i].phy == phy && chips[i].type == 0) return &chips[i];
    return NULL;
}

static void copy_name(unsigned char *dst, const char *src) {
    memset(dst, 0, MAX_CHIP_NAME_LEN);
    memcpy(dst, src, strnlen(src, MAX_CHIP_NAME_LEN - 1));
}

/* --- shared answers, by chip --------------------------------------------------------- */

static int answer_health(struct chip *c, unsigned int *health) {
    if (!c) return INVALID_DEVICE_ID;
    *health = (unsigned int)c->health;
    return 0;
}

static int answer_hbm(struct chip *c, struct dcmi_hbm_info *info) {
    if (!c) return INVALID_DEVICE_ID;
    if (!c->hbm) return NOT_SUPPORT;
    memset(info, 0, sizeof *info);
    info->memory_size = c->hbm;
    info->memory_usage = c->hbm_used;
    return 0;
}

static int answer_util(struct chip *c, int kind, unsigned int *rate) {
    if (!c) return INVALID_DEVICE_ID;
    if (kind != 2) return NOT_SUPPORT; /* only DCMI_UTILIZATION_RATE_AICORE */
    *rate = (unsigned int)c->util;
    return 0;
}

static int answer_pcie(struct chip *c, struct dcmi_pcie_info_all *info) {
    if (!c) return INVALID_DEVICE_ID;
    memset(info, 0, sizeof *info);
    info->venderid = 0x19e5;
    info->domain = c->domain;
    info->bdf_busid = (unsigned int)c->bus;
    info->bdf_deviceid = (unsigned int)c->slot;
    info->bdf_funcid = (unsigned int)c->fn;
    return 0;
}

static int answer_ecc(struct chip *c, int kind, struct dcmi_ecc_info *info) {
    if (!c) return INVALID_DEVICE_ID;
    if (!c->ecc) return NOT_SUPPORT;
    memset(info, 0, sizeof *info);
    info->enable_flag = 1;
    info->single_bit_error_cnt = (unsigned int)c->sbe;
    info->double_bit_error_cnt = (unsigned int)c->dbe;
    (void)kind;
    return 0;
}

__attribute__((unused)) static int answer_die(struct chip *c, int die_type, struct dcmi_die_id *die) {
    if (!c) return INVALID_DEVICE_ID;
    if (die_type != 0) return NOT_SUPPORT; /* NDIE only */
    memcpy(die->soc_die, c->die, sizeof c->die);
    return 0;
}

/* --- V1: dcmi_* ------------------------------------------------------------------------ */
#ifndef NO_V1

#ifndef OMIT_dcmi_init
int dcmi_init(void) {
    load();
    return init_code;
}
#endif

static int list_cards(int *card_num, int *card_list, int list_len) {
    int n = 0;
    for (int i = 0; i < n_chips; i++) {
        int known = 0;
        for (int j = 0; j < n; j++) known |= card_list[j] == chips[i].card;
        if (!known) {
            if (n >= list_len) return INVALID_PARAMETER;
            card_list[n++] = chips[i].card;
        }
    }
    *card_num = n;
    return 0;
}

#ifndef OMIT_dcmi_get_card_list
int dcmi_get_card_list(int *card_num, int *card_list, int list_len) {
    ENTER("dcmi_get_card_list");
    return list_cards(card_num, card_list, list_len);
}
#endif

/* The 2021 header's name for the same call (-DLEGACY_CARD_LIST). */
#ifdef LEGACY_CARD_LIST
int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len) {
    ENTER("dcmi_get_card_num_list");
    return list_cards(card_num, card_list, list_len);
}
#endif

#ifndef OMIT_dcmi_get_device_num_in_card
int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    ENTER("dcmi_get_device_num_in_card");
    int n = 0;
    for (int i = 0; i < n_chips; i++) n += chips[i].card == card_id;
    *device_num = n;
    return n ? 0 : INVALID_DEVICE_ID;
}
#endif

int dcmi_get_device_type(int card_id, int device_id, int *device_type) {
    ENTER("dcmi_get_device_type");
    struct chip *c = by_card(card_id, device_id);
    if (!c) return INVALID_DEVICE_ID;
    *device_type = c->type;
    return 0;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *info) {
    ENTER("dcmi_get_device_chip_info");
    struct chip *c = by_card(card_id, device_id);
    if (!c) return INVALID_DEVICE_ID;
    copy_name(info->chip_type, c->ctype);
    copy_name(info->chip_name, c->name);
    copy_name(info->chip_ver, c->ver);
    info->aicore_cnt = (unsigned int)c->aicore;
    return 0;
}

int dcmi_get_device_logic_id(int *logic, int card_id, int device_id) {
    ENTER("dcmi_get_device_logic_id");
    struct chip *c = by_card(card_id, device_id);
    if (!c) return INVALID_DEVICE_ID;
    *logic = c->logic;
    return 0;
}

#ifndef OMIT_dcmi_get_device_phyid_from_logicid
int dcmi_get_device_phyid_from_logicid(unsigned int logic, unsigned int *phy) {
    ENTER("dcmi_get_device_phyid_from_logicid");
    struct chip *c = by_logic((int)logic);
    if (!c) return INVALID_DEVICE_ID;
    *phy = (unsigned int)c->phy;
    return 0;
}
#endif

#ifndef OMIT_dcmi_get_device_health
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health) {
    ENTER("dcmi_get_device_health");
    return answer_health(by_card(card_id, device_id), health);
}
#endif

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *info) {
    ENTER("dcmi_get_device_hbm_info");
    return answer_hbm(by_card(card_id, device_id), info);
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id,
                                   struct dcmi_get_memory_info_stru *info) {
    ENTER("dcmi_get_device_memory_info_v3");
    struct chip *c = by_card(card_id, device_id);
    if (!c) return INVALID_DEVICE_ID;
    if (!c->ddr) return NOT_SUPPORT;
    memset(info, 0, sizeof *info);
    info->memory_size = c->ddr;
    info->utiliza = (unsigned int)c->ddr_util;
    return 0;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int kind, unsigned int *rate) {
    ENTER("dcmi_get_device_utilization_rate");
    return answer_util(by_card(card_id, device_id), kind, rate);
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    ENTER("dcmi_get_device_temperature");
    struct chip *c = by_card(card_id, device_id);
    if (!c) return INVALID_DEVICE_ID;
    *temperature = c->temp;
    return 0;
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    ENTER("dcmi_get_device_power_info");
    struct chip *c = by_card(card_id, device_id);
    if (!c) return INVALID_DEVICE_ID;
    *power = c->power;
    return 0;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *info) {
    ENTER("dcmi_get_device_pcie_info_v2");
    return answer_pcie(by_card(card_id, device_id), info);
}

int dcmi_get_device_ecc_info(int card_id, int device_id, int kind, struct dcmi_ecc_info *info) {
    ENTER("dcmi_get_device_ecc_info");
    return answer_ecc(by_card(card_id, device_id), kind, info);
}

#ifndef OMIT_dcmi_get_device_die_v2
int dcmi_get_device_die_v2(int card_id, int device_id, int die_type, struct dcmi_die_id *die) {
    ENTER("dcmi_get_device_die_v2");
    return answer_die(by_card(card_id, device_id), die_type, die);
}
#endif

#endif /* NO_V1 */

/* --- V2: dcmiv2_* (A5 generation: no card level, chips addressed by logical id) --------- */
#ifndef NO_V2

int dcmiv2_init(void) {
    load();
    return initv2_code;
}

int dcmiv2_get_device_list(int *device_list, int *device_num, int list_len) {
    ENTER("dcmiv2_get_device_list");
    int n = 0;
    for (int i = 0; i < n_chips; i++) {
        if (chips[i].type != 0) continue;
        if (n >= list_len) return INVALID_PARAMETER;
        device_list[n++] = chips[i].logic;
    }
    *device_num = n;
    return 0;
}

int dcmiv2_get_device_chip_info(int dev_id, struct dcmi_chip_info_v2 *info) {
    ENTER("dcmiv2_get_device_chip_info");
    struct chip *c = by_logic(dev_id);
    if (!c) return INVALID_DEVICE_ID;
    copy_name(info->chip_type, c->ctype);
    copy_name(info->chip_name, c->name);
    copy_name(info->chip_ver, c->ver);
    copy_name(info->npu_name, c->npu);
    info->aicore_cnt = (unsigned int)c->aicore;
    return 0;
}

int dcmiv2_get_chip_phyid_from_dev_id(unsigned int dev_id, unsigned int *phy) {
    ENTER("dcmiv2_get_chip_phyid_from_dev_id");
    struct chip *c = by_logic((int)dev_id);
    if (!c) return INVALID_DEVICE_ID;
    *phy = (unsigned int)c->phy;
    return 0;
}

int dcmiv2_get_device_health(int dev_id, unsigned int *health) {
    ENTER("dcmiv2_get_device_health");
    return answer_health(by_logic(dev_id), health);
}

int dcmiv2_get_device_hbm_info(int dev_id, struct dcmi_hbm_info *info) {
    ENTER("dcmiv2_get_device_hbm_info");
    return answer_hbm(by_logic(dev_id), info);
}

int dcmiv2_get_device_utilization_rate(int dev_id, int kind, unsigned int *rate) {
    ENTER("dcmiv2_get_device_utilization_rate");
    return answer_util(by_logic(dev_id), kind, rate);
}

int dcmiv2_get_device_pcie_info(int dev_id, struct dcmi_pcie_info_all *info) {
    ENTER("dcmiv2_get_device_pcie_info");
    return answer_pcie(by_logic(dev_id), info);
}

int dcmiv2_get_device_ecc_info(int dev_id, int kind, struct dcmi_ecc_info *info) {
    ENTER("dcmiv2_get_device_ecc_info");
    return answer_ecc(by_logic(dev_id), kind, info);
}

/* A5 drivers answer die queries for the DDIE only (see the plugin's library.die_id). */
int dcmiv2_get_device_die(int dev_id, int die_type, struct dcmi_die_id *die) {
    ENTER("dcmiv2_get_device_die");
    struct chip *c = by_logic(dev_id);
    if (!c) return INVALID_DEVICE_ID;
    if (die_type != 2) return NOT_SUPPORT;
    memcpy(die->soc_die, c->die, sizeof c->die);
    return 0;
}

int dcmiv2_get_device_temperature(int dev_id, int *temperature) {
    ENTER("dcmiv2_get_device_temperature");
    struct chip *c = by_logic(dev_id);
    if (!c) return INVALID_DEVICE_ID;
    *temperature = c->temp;
    return 0;
}

int dcmiv2_get_device_power_info(int dev_id, int *power) {
    ENTER("dcmiv2_get_device_power_info");
    struct chip *c = by_logic(dev_id);
    if (!c) return INVALID_DEVICE_ID;
    *power = c->power;
    return 0;
}

#endif /* NO_V2 */

/* by_phy is kept for symmetry with the driver's phy-id lookups used by future tests. */
int fake_dcmi_has_phy(unsigned int phy) {
    load();
    return by_phy(phy) != NULL;
}
