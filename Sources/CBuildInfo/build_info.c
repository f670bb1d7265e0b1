// The commit is stamped by scripts/stamp-commit.sh (run by `make build`, `make install` and `make deb`) into
// commit.h, which git ignores; a plain `swift build` of a fresh clone has no commit.h and says "unknown".
#include "build_info.h"

#if __has_include("commit.h")
#include "commit.h"
#else
#define KLARNA_RECONCILER_COMMIT "unknown"
#endif

const char *klarna_reconciler_commit(void) { return KLARNA_RECONCILER_COMMIT; }
