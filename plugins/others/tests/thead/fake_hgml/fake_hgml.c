/* A fake of T-Head's HGML (libhgml.so): NVML's C API under hgml names.
 *
 * PPUs come from the table named by FAKE_HGML_TABLE; the NVML-shaped calls and their keys
 * are fake_nvml_shaped.h's. HGML's own key: ecc_ue=<uncorrected volatile ECC errors>.
 * Compile with -DFAKE_OMIT_ECC to leave hgmlDeviceGetTotalEccErrors out, or with
 * -DFAKE_OMIT_NAME to leave a required call out.
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
