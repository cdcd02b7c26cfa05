/* A fake of Iluvatar's IXML (libixml.so): NVML's C API names plus ixmlDeviceGetHealth.
 *
 * Devices come from the table named by FAKE_IXML_TABLE; the NVML-shaped calls and their
 * keys are fake_nvml_shaped.h's. IXML's own key: health= (bit mask, 0 = OK).
 * Compile with -DFAKE_OMIT_HEALTH to leave ixmlDeviceGetHealth out (an older IXML).
 */
#define FAKE_API(name) nvml##name
#define TABLE "FAKE_IXML_TABLE"
#define FAKE_DRIVER "4.1.0"
#define FAKE_UUID "GPU-unknown"
#define FAKE_NAME "Iluvatar BI-V150"
#include "fake_nvml_shaped.h"

#ifndef FAKE_OMIT_HEALTH
int ixmlDeviceGetHealth(void *h, unsigned long long *health) {
    const fake_row *d = fake_dev(h);
    if (!d || !health) return INVALID_ARGUMENT;
    *health = (unsigned long long)fake_int(d, "health", 0);
    return SUCCESS;
}
#endif
