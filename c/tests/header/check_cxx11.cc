// check_cxx11.cc - the public headers must compile as C++11 (-std=c++11 -pedantic -Werror) with C linkage.
/* each header includes what it needs: the format headers first, then strata.h */
#include "strata_quant.h"
#include "strata_gguf.h"
#include "strata.h"

static_assert(STRATA_OK == 0, "STRATA_OK must be 0");
static_assert(STRATA_TYPE_Q8_0 == 8, "type ids are the GGUF ids");

extern "C" int strata_header_check_cxx11(void) {
    strata_gguf_value v;
    v.type = STRATA_GGUF_UINT32;
    v.v.u64 = 3;
    const char *(*fn)(void) = &strata_version;  // C linkage function pointer
    return (fn != nullptr) + static_cast<int>(v.v.u64);
}
