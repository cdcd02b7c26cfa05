/* A fake of Vastai's VAML 1.0 (libvaml.so): cards, their dies, die memory and utilisation.
 *
 * Cards come from the table named by FAKE_VAML_TABLE (see fake_table.h), one `device` row a
 * card. Keys:
 *   global: init=<vamlOpStatus_t of vamlInit> version=<string>
 *   card:   dies=<count> mem_total= mem_used= (bytes, per die) util=<ten-thousandths>
 *           bad_die=<die index whose memory call fails, -1 none> dies_reported=<override>
 * A card handle is its index plus one; a die handle is card handle * 100 + die index.
 * Compile with -DFAKE_OMIT_UTILIZE to leave vamlDeviceGetDieUtilizeTotal out, or with
 * -DFAKE_OMIT_MEMORY to leave a required call out.
 */
#include "fake_table.h"

#define TABLE "FAKE_VAML_TABLE"
#define SUCCESS 0
#define INVALID_ARGUMENT 1
#define NOT_FOUND 4
#define UNKNOWN 5

typedef struct { unsigned long long total, free, used; } vamlDieMemory_struct;
typedef struct { int vdsp, vemcu, vdmcu; } vamlDieUtilizeTotal_struct;

static int shutdown_calls;
int fake_vaml_shutdown_calls(void) { return shutdown_calls; }

static const fake_row *card(int handle) {
    fake_load(TABLE);
    return fake_device((long long)handle - 1);
}

static const fake_row *die(int handle, int *index) {
    const fake_row *c = card(handle / 100);
    *index = handle % 100;
    if (!c || *index >= fake_int(c, "dies", 1)) return NULL;
    return c;
}

int vamlInit(void) { fake_load(TABLE); return (int)fake_int(&fake_global_row, "init", SUCCESS); }
int vamlShutDown(void) { shutdown_calls++; return SUCCESS; }

int vamlGetVersion(char *version) {
    if (!version) return INVALID_ARGUMENT;
    fake_load(TABLE);
    strcpy(version, fake_str(&fake_global_row, "version", "1.0.3"));
    return SUCCESS;
}

int vamlDeviceGetCount(unsigned int *count) {
    if (!count) return INVALID_ARGUMENT;
    fake_load(TABLE);
    *count = (unsigned int)fake_device_count;
    return SUCCESS;
}

int vamlDeviceGetHandleByIndex(unsigned int index, int *device) {
    fake_load(TABLE);
    if (!device || !fake_device(index)) return NOT_FOUND;
    *device = (int)index + 1;
    return SUCCESS;
}

int vamlDeviceGetDieCount(int device, unsigned int *count) {
    const fake_row *c = card(device);
    if (!c || !count) return INVALID_ARGUMENT;
    *count = (unsigned int)fake_int(c, "dies_reported", fake_int(c, "dies", 1));
    return SUCCESS;
}

int vamlDieGetHandleByIndex(int device, unsigned int index, int *handle) {
    const fake_row *c = card(device);
    if (!c || !handle) return INVALID_ARGUMENT;
    if ((long long)index >= fake_int(c, "dies", 1)) return NOT_FOUND;
    *handle = device * 100 + (int)index;
    return SUCCESS;
}

#ifndef FAKE_OMIT_MEMORY
int vamlDeviceGetDieMemory(int handle, vamlDieMemory_struct *m) {
    int index;
    const fake_row *c = die(handle, &index);
    if (!c || !m) return INVALID_ARGUMENT;
    if (fake_int(c, "bad_die", -1) == index) return UNKNOWN;
    m->total = (unsigned long long)fake_int(c, "mem_total", 0);
    m->used = (unsigned long long)fake_int(c, "mem_used", 0);
    m->free = m->total - m->used;
    return SUCCESS;
}
#endif

#ifndef FAKE_OMIT_UTILIZE
int vamlDeviceGetDieUtilizeTotal(int handle, vamlDieUtilizeTotal_struct *u) {
    int index;
    const fake_row *c = die(handle, &index);
    if (!c || !u) return INVALID_ARGUMENT;
    u->vdsp = (int)fake_int(c, "util", 0);
    u->vemcu = 0;
    u->vdmcu = 0;
    return SUCCESS;
}
#endif
