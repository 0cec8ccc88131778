/* Thread-local error text behind every negative status. */
#include <stdarg.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>
#include "internal.h"

static __thread char last_error[512];

const char *cxb_last_error(void) { return last_error; }

int cxb_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    if (err > 0 && n >= 0 && (size_t)n < sizeof last_error)
        snprintf(last_error + n, sizeof last_error - n, ": %s", strerror(err));
    return -(err > 0 ? err : EINVAL);
}
