#ifndef KLARNA_RECONCILER_BUILD_INFO_H
#define KLARNA_RECONCILER_BUILD_INFO_H

/// The git commit this binary was built from ("unknown" outside `make`).
const char *klarna_reconciler_commit(void);

#endif
