#ifndef CZEROMQ_SHIM_H
#define CZEROMQ_SHIM_H
#include <zmq.h>
#include <sys/eventfd.h>  /* Mailbox's wake-up: Glibc's module map leaves it out. */
#endif
