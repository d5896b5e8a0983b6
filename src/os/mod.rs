//! What this end asks of the operating system: the FFI (`sys`, the one module where
//! `unsafe` is allowed), sockets and their options (`net`), granted windows and the
//! sysctls that cap them (`netinfo`), CPU time per thread and per core (`cpu`), the
//! kernel's own counters (`kstat`), and the host's CPU and NIC layout (`topology`).

pub(crate) mod cpu;
pub(crate) mod kstat;
pub(crate) mod net;
pub(crate) mod netinfo;
pub(crate) mod sys;
pub(crate) mod topology;
