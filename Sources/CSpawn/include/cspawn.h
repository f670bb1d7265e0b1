#ifndef CSPAWN_H
#define CSPAWN_H

// glibc's posix_spawn extensions that its headers declare only under _GNU_SOURCE, which Swift's Glibc module is not
// built with. `actions` is a posix_spawn_file_actions_t *; no glibc header here, so the module's types stay Glibc's.
int cspawn_addchdir(void *actions, const char *path);
int cspawn_addclosefrom(void *actions, int from);

#endif
