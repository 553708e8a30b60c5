/* kilntainers WASI compat stub: see kt_compat.h */
#include <kt_compat.h>
