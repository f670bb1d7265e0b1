#define _GNU_SOURCE
#include <spawn.h>

#include "cspawn.h"

int cspawn_addchdir(void *actions, const char *path) {
    return posix_spawn_file_actions_addchdir_np((posix_spawn_file_actions_t *)actions, path);
}

// glibc 2.34: the child closes every descriptor from `from` on, without anyone listing /proc/self/fd.
int cspawn_addclosefrom(void *actions, int from) {
    return posix_spawn_file_actions_addclosefrom_np((posix_spawn_file_actions_t *)actions, from);
}
