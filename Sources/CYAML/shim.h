#ifndef SCOPEPROXY_CYAML_SHIM_H
#define SCOPEPROXY_CYAML_SHIM_H
#include <sys/types.h>
#include <yaml.h>
#endif
