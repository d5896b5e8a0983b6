//! The crate's only `unsafe`, and its only system calls: nix's safe wrappers where nix
//! has them (setns, ppoll, signal masks and waits, timer slack, getrusage, memfd,
//! sendfile), and by hand what nix and socket2 lack or what the data path calls per batch:
//! TCP_INFO with the modern fields, IP_MTU/IPV6_MTU, SO_SNDBUFFORCE/SO_RCVBUFFORCE,
//! SO_MAX_PACING_RATE; `sendmmsg` with GSO and `recvmmsg` with GRO and SO_RXQ_OVFL control
//! messages over fixed arrays; `MSG_ZEROCOPY` sends and their completions, `MSG_TRUNC`
//! receives, `SO_TIMESTAMPNS` receive stamps, TUN devices, `sigtimedwait`, strftime.
//! Each hand-written call returns `io::Error::last_os_error()` on -1. Linux only.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::sys::signal::{SigSet, Signal};

/// Linux `struct tcp_info` up to `tcpi_rcv_wnd` (kernel 6.x). Older kernels fill a prefix;
/// [`tcp_info`] reports how many bytes were filled so callers can treat the rest as absent.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub wscale: u8,
    pub app_limited: u8,
    pub rto_us: u32,
    pub ato_us: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent_ms: u32,
    pub last_ack_sent_ms: u32,
    pub last_data_recv_ms: u32,
    pub last_ack_recv_ms: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt_us: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt_us: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub delivered: u32,
    pub delivered_ce: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
}

/// A system call's result: negative is the errno (`-1`), anything else the count.
fn cvt<T: TryInto<usize>>(n: T) -> io::Result<usize> {
    n.try_into().map_err(|_| io::Error::last_os_error())
}

pub(crate) fn getsockopt_raw<T: Copy + Default>(
    fd: BorrowedFd<'_>,
    level: i32,
    name: i32,
) -> io::Result<(T, usize)> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live, properly aligned T and `len` is its size; the kernel writes
    // at most `len` bytes and updates `len` with what it wrote.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast::<libc::c_void>(),
            &mut len,
        )
    };
    cvt(rc)?;
    Ok((value, len as usize))
}

fn setsockopt_int(fd: BorrowedFd<'_>, level: i32, name: i32, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(rc).map(drop)
}

/// Reads `TCP_INFO`; returns the struct and how many bytes the kernel filled.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<(TcpInfo, usize)> {
    getsockopt_raw::<TcpInfo>(fd, libc::IPPROTO_TCP, libc::TCP_INFO)
}

/// The path MTU the kernel holds for a connected socket (`IP_MTU` / `IPV6_MTU`).
pub fn path_mtu(fd: BorrowedFd<'_>, ipv6: bool) -> io::Result<u32> {
    let (level, name) = if ipv6 {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    } else {
        (libc::IPPROTO_IP, libc::IP_MTU)
    };
    getsockopt_raw::<libc::c_int>(fd, level, name).map(|(v, _)| v.max(0) as u32)
}

/// `SO_SNDBUFFORCE` / `SO_RCVBUFFORCE`: exceed `net.core.{w,r}mem_max` (needs CAP_NET_ADMIN).
pub fn set_buffer_force(fd: BorrowedFd<'_>, send: bool, bytes: u64) -> io::Result<()> {
    let name = if send {
        libc::SO_SNDBUFFORCE
    } else {
        libc::SO_RCVBUFFORCE
    };
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd, libc::SOL_SOCKET, name, value)
}

/// `recv(MSG_DONTWAIT)`: whatever is queued now, or `WouldBlock`. Used by senders to
/// collect block-header echoes between blocking writes.
pub fn recv_nowait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable slice and its length bounds what the kernel writes.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    cvt(n)
}

/// `send(MSG_DONTWAIT | MSG_NOSIGNAL)`: queue what fits now, never block. Used by
/// receivers to echo block headers without stalling the read loop.
pub fn send_nowait(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live slice; the kernel only reads `buf.len()` bytes from it.
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    cvt(n)
}

/// Whose CPU time [`cpu_time_us`] reads.
#[derive(Debug, Clone, Copy)]
pub enum Who {
    Process,
    Thread,
}

/// `getrusage()`: user and system CPU time in µs; zeroes if the call fails (it cannot
/// with valid arguments).
pub fn cpu_time_us(who: Who) -> (u64, u64) {
    use nix::sys::resource::{UsageWho, getrusage};
    let who = match who {
        Who::Process => UsageWho::RUSAGE_SELF,
        Who::Thread => UsageWho::RUSAGE_THREAD,
    };
    let Ok(usage) = getrusage(who) else {
        return (0, 0);
    };
    let us = |tv: nix::sys::time::TimeVal| tv.tv_sec() as u64 * 1_000_000 + tv.tv_usec() as u64;
    (us(usage.user_time()), us(usage.system_time()))
}

/// One entry for [`poll`]: `fd`, watched for `events`.
pub fn pollfd(fd: std::os::fd::RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// `poll()` over `fds` for up to `timeout_ms`; returns how many are ready.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a live, writable slice of pollfd and its length is passed with it.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
    cvt(n)
}

/// The memory page size in bytes (what net.ipv4.tcp_mem counts in).
pub fn page_size() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE) {
        Ok(Some(n)) if n > 0 => n as u64,
        _ => 4096,
    }
}

/// The local time now, formatted by strftime(3)'s `format` (`--timestamps`: `"%c "`).
/// A format with a NUL byte is refused; one that formats to more than 255 bytes is empty.
pub fn local_time(format: &str) -> io::Result<String> {
    let fmt = std::ffi::CString::new(format)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in the format"))?;
    // SAFETY: time(NULL) only returns the time.
    let now = unsafe { libc::time(std::ptr::null_mut()) };
    // SAFETY: `tm` is plain data; all-zero is a valid value that localtime_r overwrites.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types.
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 256];
    // SAFETY: `buf` has `buf.len()` writable bytes, `fmt` is NUL-terminated, `tm` is
    // filled; strftime writes at most `buf.len()` bytes and returns how many (without NUL).
    let n = unsafe {
        libc::strftime(
            buf.as_mut_ptr().cast::<libc::c_char>(),
            buf.len(),
            fmt.as_ptr(),
            &tm,
        )
    };
    Ok(String::from_utf8_lossy(&buf[..n.min(buf.len())]).into_owned())
}

/// This host's name (its UTS namespace's), where the kernel has one.
pub fn hostname() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}

/// This host's mark for the test with `cookie`: a hash of the kernel's boot id (one for
/// every network namespace of a boot) and the cookie. Two ends with the same mark share a
/// host, and neither sent its boot id. None where `/proc` has no boot id.
pub fn host_mark(cookie: u64) -> Option<u64> {
    use sha2::Digest;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let mut h = sha2::Sha256::new();
    h.update(boot.trim().as_bytes());
    h.update(cookie.to_le_bytes());
    let d = h.finalize();
    Some(u64::from_le_bytes(d[..8].try_into().ok()?))
}

/// True when the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Detaches the process as daemon(3) does: the parent exits 0, the child runs on in a
/// new session with stdin, stdout and stderr on /dev/null, in the same directory. Only the
/// calling thread goes on in the child: call it before any other thread starts.
pub fn daemonize() -> io::Result<()> {
    nix::unistd::daemon(true, false).map_err(io::Error::from)
}

/// True when a process `pid` exists (signal 0 reaches it, or it is another user's).
pub fn process_exists(pid: i32) -> bool {
    let pid = nix::unistd::Pid::from_raw(pid);
    matches!(
        nix::sys::signal::kill(pid, None),
        Ok(()) | Err(nix::errno::Errno::EPERM)
    )
}

/// Opens the TUN device `name` (created if absent) in the calling thread's network
/// namespace, packets without a protocol-info prefix, non-blocking.
pub fn tun_open(name: &str) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{FromRawFd, OwnedFd};
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    // SAFETY: the path is a NUL-terminated literal; the flags are valid for open().
    let fd = unsafe {
        libc::open(
            c"/dev/net/tun".as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    cvt(fd)?;
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is a valid value of this plain C struct.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which `req` is; `fd` is a tun fd.
    cvt(unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req) })?;
    Ok(owned)
}

/// Moves the calling thread into the network namespace `ns` (an open /run/netns/NAME).
/// Threads it starts afterwards, and sockets it creates, belong to that namespace.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    Ok(nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)?)
}

/// Waits until `fd` is readable or `timeout` passes (nanosecond resolution, unlike
/// `poll()`); true when readable.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    use nix::poll::{PollFd, PollFlags, ppoll};
    let mut pfd = [PollFd::new(fd, PollFlags::POLLIN)];
    match ppoll(&mut pfd, Some(timeout.into()), None) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Sets the calling thread's timer slack (how late the kernel may wake it), in ns.
pub fn set_timer_slack(ns: u64) {
    // Failure leaves the default.
    let _ = nix::sys::prctl::set_timerslack(ns as libc::c_ulong);
}

/// Gives the calling thread real-time priority `prio` (SCHED_FIFO), so it preempts
/// ordinary threads on its core. Needs root (CAP_SYS_NICE).
pub fn set_realtime(prio: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: pid 0 is the calling thread; `param` is a live sched_param.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) })?;
    Ok(())
}

/// Whether this process may give its threads real-time priority `prio`: tried on a thread
/// of its own, which ends with it.
pub fn may_realtime(prio: i32) -> io::Result<()> {
    std::thread::Builder::new()
        .name("realtime-probe".into())
        .spawn(move || set_realtime(prio))?
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the probing thread panicked")))
}

/// Signal set of SIGINT, SIGTERM and SIGHUP, the ones that end a run from outside, less
/// those this process was started ignoring: `nohup` ignores SIGHUP and a non-interactive
/// shell's background job SIGINT, and they must stay ignored (a blocked signal is queued
/// even when its disposition is to ignore it, so taking it would undo theirs).
fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        if !ignored(sig) {
            set.add(sig);
        }
    }
    set
}

/// `sig`'s disposition is to ignore it (nix's `sigaction` only sets one).
fn ignored(sig: Signal) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into a live,
    // zeroed sigaction.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig as libc::c_int, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and every thread it starts
/// afterwards, so that one thread can take them with [`wait_stop_signal`].
pub fn block_stop_signals() -> io::Result<()> {
    Ok(stop_signals().thread_block()?)
}

/// Waits for SIGINT, SIGTERM or SIGHUP (blocked by [`block_stop_signals`]); returns it.
pub fn wait_stop_signal() -> i32 {
    stop_signals().wait().map_or(0, |sig| sig as i32)
}

/// Ends the process by `sig`'s default action, once the run has printed what it measured:
/// a shell running pinperf in a loop then sees that the signal killed it and stops the loop
/// as well (bash goes on with the loop when the child only exits 128 + sig).
pub fn die_by(sig: i32) -> ! {
    if let Ok(signal) = Signal::try_from(sig) {
        // SAFETY: SIG_DFL installs no handler of ours, so no handler can run unsafely.
        let _ = unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) };
        let mut set = SigSet::empty();
        set.add(signal);
        let _ = set.thread_unblock();
        // Unblocked now, the signal takes its default action here: the process ends.
        let _ = nix::sys::signal::raise(signal);
    }
    std::process::exit(128 + sig)
}

/// Like [`wait_stop_signal`], but gives up after `timeout`: `None` when no stop signal
/// came in that time.
pub fn wait_stop_signal_for(timeout: std::time::Duration) -> Option<i32> {
    let set = stop_signals();
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` is initialised, the siginfo pointer may be null, `ts` is a live
        // timespec.
        let sig = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &ts) };
        if sig > 0 {
            return Some(sig);
        }
        // EAGAIN: the time is up; EINTR (another signal's handler ran): wait on.
        if left.is_zero() || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// `SO_RXQ_OVFL` and `SO_MAX_PACING_RATE` (asm-generic numbers: x86, arm, riscv, powerpc;
/// the libc crate does not export them for glibc targets).
const SO_RXQ_OVFL: libc::c_int = 40;
const SO_MAX_PACING_RATE: libc::c_int = 47;

/// `SO_MAX_PACING_RATE`: caps the kernel's pacing of this socket at `bytes_per_sec` (TCP
/// paces itself on current kernels; with the fq qdisc otherwise). Passes a u64 (kernels
/// since 4.20 take one) and falls back to a u32 capped at its largest value.
pub fn set_max_pacing_rate(fd: BorrowedFd<'_>, bytes_per_sec: u64) -> io::Result<()> {
    // SAFETY: passes a pointer to a live u64 and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MAX_PACING_RATE,
            (&bytes_per_sec as *const u64).cast::<libc::c_void>(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let narrow = u32::try_from(bytes_per_sec).unwrap_or(u32::MAX);
    setsockopt_int(
        fd,
        libc::SOL_SOCKET,
        SO_MAX_PACING_RATE,
        narrow as libc::c_int,
    )
}

/// `TCP_NOTSENT_LOWAT`: a writer blocks (or polls unwritable) while the socket holds this
/// many bytes not yet sent, whatever room its send buffer has.
pub fn set_notsent_lowat(fd: BorrowedFd<'_>, bytes: u32) -> io::Result<()> {
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, bytes)
}

/// `SO_RCVLOWAT`: a blocking `recv()` returns once this many bytes are queued (or at
/// EOF, an error, or its timeout with what it has). The kernel caps it at half the most
/// the receive buffer may grow to.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let bytes = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes)
}

/// Reads `SO_RCVLOWAT` back.
#[cfg(test)]
pub fn rcvlowat(fd: BorrowedFd<'_>) -> io::Result<usize> {
    getsockopt_raw::<libc::c_int>(fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT)
        .map(|(v, _)| v.max(0) as usize)
}

/// Reads `SO_MAX_PACING_RATE` back, bytes/s (`u64::MAX` or `u32::MAX`: no cap).
pub fn max_pacing_rate(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let (v, len) = getsockopt_raw::<u64>(fd, libc::SOL_SOCKET, SO_MAX_PACING_RATE)?;
    Ok(if len == 4 { v & 0xffff_ffff } else { v })
}

/// Sets the Don't Fragment bit on an IPv4 socket's datagrams (`IP_MTU_DISCOVER` =
/// `IP_PMTUDISC_DO`): one larger than the path MTU fails to send instead of being split.
pub fn set_dont_fragment(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(
        fd,
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO,
    )
}

/// `struct in6_flowlabel_req` (linux/in6.h), which libc does not declare.
#[repr(C)]
struct FlowLabelReq {
    dst: [u8; 16],
    /// The label, in network byte order.
    label: u32,
    action: u8,
    share: u8,
    flags: u16,
    expires: u16,
    linger: u16,
    pad: u32,
}

/// Leases IPv6 flow label `label` (20 bits) toward `dst` on a socket before `connect()`
/// (`IPV6_FLOWLABEL_MGR`, get-or-create, shared with any socket) and turns on sending it
/// (`IPV6_FLOWINFO_SEND`). Returns the flow information the address connected to must then
/// carry: the label in network byte order.
pub fn lease_flow_label(
    fd: BorrowedFd<'_>,
    dst: std::net::Ipv6Addr,
    label: u32,
) -> io::Result<u32> {
    const IPV6_FL_A_GET: u8 = 0;
    const IPV6_FL_S_ANY: u8 = 255;
    const IPV6_FL_F_CREATE: u16 = 1;
    let req = FlowLabelReq {
        dst: dst.octets(),
        label: (label & 0x000f_ffff).to_be(),
        action: IPV6_FL_A_GET,
        share: IPV6_FL_S_ANY,
        flags: IPV6_FL_F_CREATE,
        expires: 0,
        linger: 0,
        pad: 0,
    };
    // SAFETY: passes a pointer to a live, fully initialised `in6_flowlabel_req` and its
    // exact size; the kernel only reads it for IPV6_FL_A_GET.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_FLOWLABEL_MGR,
            (&req as *const FlowLabelReq).cast::<libc::c_void>(),
            std::mem::size_of::<FlowLabelReq>() as libc::socklen_t,
        )
    };
    cvt(rc)?;
    setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO_SEND, 1)?;
    Ok(req.label)
}

/// Asks the kernel to report datagrams dropped on the socket's receive queue
/// (`SO_RXQ_OVFL`): each received datagram then carries the socket's drop count.
pub fn set_rxq_ovfl(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, SO_RXQ_OVFL, 1)
}

/// Turns UDP GRO on (`UDP_GRO`, kernel 5.0+): the kernel may hand several datagrams of
/// one flow over in one buffer, with their segment size in a control message.
pub fn set_udp_gro(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1)
}

/// True when the kernel knows UDP GSO (`UDP_SEGMENT`, kernel 4.18+).
pub fn udp_gso_supported(fd: BorrowedFd<'_>) -> bool {
    getsockopt_raw::<libc::c_int>(fd, libc::SOL_UDP, libc::UDP_SEGMENT).is_ok()
}

/// Most messages one [`send_datagrams`] or [`recv_datagrams`] call handles.
pub const MAX_MSGS: usize = 64;

/// Room for one message's control data: a `UDP_SEGMENT`/`UDP_GRO` int and an
/// `SO_RXQ_OVFL` u32, each in its own aligned cmsg, with slack.
const CTRL_BYTES: usize = 64;

/// `sendmmsg()` on a connected socket: `data` cut into messages of `msg_len` bytes (the
/// last may be shorter), at most [`MAX_MSGS`]. With `gso_size`, each message carries a
/// `UDP_SEGMENT` control message and the kernel cuts it into datagrams of that size
/// (`msg_len` must then be at most 64 segments and 65507 bytes). Returns the number of
/// messages sent (from the first).
pub fn send_datagrams(
    fd: BorrowedFd<'_>,
    data: &[u8],
    msg_len: usize,
    gso_size: Option<u16>,
) -> io::Result<usize> {
    if msg_len == 0 || data.is_empty() {
        return Ok(0);
    }
    let count = data.len().div_ceil(msg_len).min(MAX_MSGS);
    // SAFETY: all-zero iovec, mmsghdr and control arrays are valid plain C values.
    let mut iovs: [libc::iovec; MAX_MSGS] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_MSGS] = unsafe { std::mem::zeroed() };
    let mut ctrl = [[0u64; CTRL_BYTES / 8]; MAX_MSGS];
    for (i, chunk) in data.chunks(msg_len).take(count).enumerate() {
        iovs[i] = libc::iovec {
            // The kernel only reads through this pointer (sendmmsg).
            iov_base: chunk.as_ptr() as *mut libc::c_void,
            iov_len: chunk.len(),
        };
        let hdr = &mut msgs[i].msg_hdr;
        hdr.msg_iov = &mut iovs[i];
        hdr.msg_iovlen = 1;
        if let Some(seg) = gso_size {
            hdr.msg_control = ctrl[i].as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a size.
            hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            // SAFETY: msg_control points at CTRL_BYTES (>= CMSG_SPACE(2)) aligned, writable
            // bytes and msg_controllen says so, so CMSG_FIRSTHDR is non-null and its data
            // has room for the u16 written unaligned.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(2) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
    }
    // SAFETY: `msgs[..count]` are initialised headers whose iovecs point into `data` and
    // whose control buffers live on this stack frame, all valid for the call's duration.
    let n = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_NOSIGNAL,
        )
    };
    cvt(n)
}

/// One message [`recv_datagrams`] received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes in the message's buffer.
    pub len: usize,
    /// With GRO: the size of each coalesced datagram (the last may be shorter).
    pub gro_size: Option<u16>,
    /// The socket's cumulative receive-queue drop count (`SO_RXQ_OVFL`), when enabled.
    pub rxq_drops: Option<u32>,
    /// The datagram was longer than its buffer (`MSG_TRUNC`).
    pub truncated: bool,
}

/// `recvmmsg(MSG_WAITFORONE)`: blocks (up to the socket's `SO_RCVTIMEO`) for the first
/// message, then takes whatever else is queued, up to `meta.len()` (at most [`MAX_MSGS`])
/// messages into consecutive `buf_len`-byte slots of `bufs`. Fills `meta` per message and
/// returns how many arrived.
pub fn recv_datagrams(
    fd: BorrowedFd<'_>,
    bufs: &mut [u8],
    buf_len: usize,
    meta: &mut [RecvMeta],
) -> io::Result<usize> {
    if buf_len == 0 {
        return Ok(0);
    }
    let count = meta.len().min(MAX_MSGS).min(bufs.len() / buf_len);
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: all-zero iovec and mmsghdr arrays are valid plain C values.
    let mut iovs: [libc::iovec; MAX_MSGS] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; MAX_MSGS] = unsafe { std::mem::zeroed() };
    let mut ctrl = [[0u64; CTRL_BYTES / 8]; MAX_MSGS];
    for (i, slot) in bufs.chunks_mut(buf_len).take(count).enumerate() {
        iovs[i] = libc::iovec {
            iov_base: slot.as_mut_ptr().cast(),
            iov_len: slot.len(),
        };
        let hdr = &mut msgs[i].msg_hdr;
        hdr.msg_iov = &mut iovs[i];
        hdr.msg_iovlen = 1;
        hdr.msg_control = ctrl[i].as_mut_ptr().cast();
        hdr.msg_controllen = CTRL_BYTES as _;
    }
    // SAFETY: `msgs[..count]` point at writable buffers in `bufs` and control buffers on
    // this stack frame, each with its true length; a null timeout uses SO_RCVTIMEO.
    let n = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    cvt(n)?;
    let n = n as usize;
    for (m, out) in msgs[..n].iter().zip(meta.iter_mut()) {
        let hdr = &m.msg_hdr;
        *out = RecvMeta {
            len: m.msg_len as usize,
            truncated: hdr.msg_flags & libc::MSG_TRUNC != 0,
            ..RecvMeta::default()
        };
        // SAFETY: the kernel set msg_controllen to what it wrote into this message's
        // control buffer; CMSG_FIRSTHDR/NXTHDR stay inside it and return null at its end,
        // and each value is read unaligned from inside its cmsg's data.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(hdr);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        let v = std::ptr::read_unaligned(data.cast::<libc::c_int>());
                        out.gro_size = u16::try_from(v).ok().filter(|&s| s > 0);
                    }
                    (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
                        out.rxq_drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(hdr, c);
            }
        }
    }
    Ok(n)
}

// --- Copy-avoiding data paths (-Z, --skip-rx-copy) and kernel receive timestamps. ---
// asm-generic/socket.h and linux/errqueue.h values (x86_64, aarch64, riscv64): the libc
// crate does not define them for Linux.
const SO_ZEROCOPY: libc::c_int = 60;
const SO_TIMESTAMPNS: libc::c_int = 35;
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// `SO_ZEROCOPY`: lets `send(MSG_ZEROCOPY)` pin the caller's pages instead of copying.
pub fn set_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, SO_ZEROCOPY, 1)
}

/// `send(MSG_ZEROCOPY | MSG_NOSIGNAL)`, blocking up to the socket's `SO_SNDTIMEO`. The
/// kernel references `buf`'s pages until it reports the send complete on the error queue
/// ([`reap_zerocopy`]); the caller must not change them before that.
pub fn send_zerocopy(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live slice; the kernel reads at most `buf.len()` bytes from it (and
    // keeps page references, not pointers into our memory map, until completion).
    let n = unsafe {
        libc::send(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL,
        )
    };
    cvt(n)
}

/// One zerocopy completion notification: sends numbered `lo..=hi` (each successful
/// `MSG_ZEROCOPY` send takes the next number, from 0) are done with their pages; `copied`
/// when the kernel copied them after all (loopback, or a device without scatter-gather).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZcDone {
    pub lo: u32,
    pub hi: u32,
    pub copied: bool,
}

/// Reads one notification from the error queue without blocking: `Ok(None)` when it is
/// empty. An error queued for another reason (a real socket error) is returned as one.
pub fn reap_zerocopy(fd: BorrowedFd<'_>) -> io::Result<Option<ZcDone>> {
    let mut ctrl = [0u64; 16];
    // SAFETY: an all-zero msghdr is a valid plain C value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_control = ctrl.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
    // SAFETY: `msg` points at a live control buffer of the stated length and no data
    // buffers (the error queue's payload is not wanted).
    let n = unsafe {
        libc::recvmsg(
            fd.as_raw_fd(),
            &mut msg,
            libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(None)
        } else {
            Err(e)
        };
    }
    // SAFETY: the kernel set msg_controllen to what it wrote into `ctrl`; CMSG_FIRSTHDR and
    // NXTHDR stay inside it, and the extended error is read unaligned from a cmsg's data.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let level_ok = matches!(
                ((*c).cmsg_level, (*c).cmsg_type),
                (libc::SOL_IP, libc::IP_RECVERR) | (libc::SOL_IPV6, libc::IPV6_RECVERR)
            );
            if level_ok {
                let ee =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::sock_extended_err>());
                if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                    return Ok(Some(ZcDone {
                        lo: ee.ee_info,
                        hi: ee.ee_data,
                        copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                    }));
                }
                if ee.ee_errno != 0 {
                    return Err(io::Error::from_raw_os_error(ee.ee_errno as i32));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(None)
}

/// `memfd_create(name, MFD_CLOEXEC)`: an anonymous file in memory, empty (size it with
/// `File::set_len`, which is `ftruncate`). Kernels before 3.17 answer `ENOSYS`.
pub fn memfd(name: &std::ffi::CStr) -> io::Result<std::os::fd::OwnedFd> {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    Ok(memfd_create(name, MFdFlags::MFD_CLOEXEC)?)
}

/// A writable `MAP_SHARED` mapping of a whole file, unmapped on drop: stores into it are
/// the file's pages themselves, the pages `sendfile` hands the socket by reference.
pub struct SharedMap {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

impl SharedMap {
    /// Maps the first `len` bytes of `fd` (a file at least that long) read-write, shared.
    pub fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<SharedMap> {
        // SAFETY: a fresh mapping placed by the kernel (no address hint, so nothing of ours
        // is replaced); `fd` is open for the call's duration.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(SharedMap { ptr, len })
    }

    /// The mapped bytes. The kernel may hold references to these pages (a `sendfile` in
    /// flight reads them later): what is stored here is what it sends.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live mapping of `len` bytes, readable and writable, owned by
        // this value until drop; `&mut self` makes this the only Rust reference to it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; no reference into it outlives
        // `self` (`bytes_mut` borrows `self`). Pages the kernel still references stay
        // alive through its own references.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// `sendfile(sock, file, &offset, len)`: the kernel queues up to `len` bytes of `file` from
/// `offset` on `sock` by page reference, no copy (blocking up to `SO_SNDTIMEO`); returns
/// how many it took. The pages must not change while the kernel may still send them.
pub fn sendfile(
    sock: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    offset: u64,
    len: usize,
) -> io::Result<usize> {
    let mut off =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(nix::sys::sendfile::sendfile(
        sock,
        file,
        Some(&mut off),
        len,
    )?)
}

/// `recv(MSG_TRUNC)` on TCP: the kernel consumes up to `len` queued bytes without copying
/// them anywhere and returns how many (blocking up to `SO_RCVTIMEO`; 0 at EOF).
pub fn recv_discard(fd: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: with MSG_TRUNC on a TCP socket the kernel writes nothing to the buffer; a
    // null pointer is what iperf3 passes too, and no memory of ours is touched.
    let n = unsafe { libc::recv(fd.as_raw_fd(), std::ptr::null_mut(), len, libc::MSG_TRUNC) };
    cvt(n)
}

/// `SO_TIMESTAMPNS`: the kernel stamps every arriving segment (CLOCK_REALTIME) and
/// [`recv_stamped_nowait`] returns the stamp of the data it read.
pub fn set_rx_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, SO_TIMESTAMPNS, 1)
}

/// `recvmsg(MSG_DONTWAIT)` into `buf`: the bytes read and, with [`set_rx_timestamps`]
/// on, when the kernel received the last segment they came from (ns of CLOCK_REALTIME).
pub fn recv_stamped_nowait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut ctrl = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid plain C value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&ctrl) as _;
    // SAFETY: `msg` points at `buf` (writable, its true length) and a live control buffer.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    cvt(n)?;
    let mut stamp = None;
    // SAFETY: as in `reap_zerocopy`: the walk stays inside what the kernel wrote.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, stamp))
}

/// Waits until `fd`'s error queue has something (a zerocopy completion) or `timeout`
/// passes; true when it has.
pub fn wait_error_queue(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> io::Result<bool> {
    // POLLERR is always reported; asking for nothing else waits for it alone.
    let mut fds = [pollfd(fd.as_raw_fd(), 0)];
    let ms = i32::try_from(timeout.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    match poll(&mut fds, ms) {
        Ok(n) => Ok(n > 0 && fds[0].revents & libc::POLLERR != 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

/// CLOCK_REALTIME now in ns (to place a kernel receive stamp on the monotonic clock).
pub fn realtime_ns() -> u64 {
    // SAFETY: an all-zero timespec is valid; clock_gettime fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a live, writable timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU's time-stamp counter (`rdtsc`), for per-block stamps where the kernel itself
/// keeps time with it ([`tsc_keeps_time`]): about half the cost of a vDSO clock_gettime.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc reads a register; it has no memory effects or preconditions on x86_64
    // (every x86_64 CPU has it).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
pub fn rdtsc() -> u64 {
    0
}

/// True when the time-stamp counter is this host's clock source (the kernel found it
/// invariant and synchronised across CPUs), so [`rdtsc`] is a clock.
pub fn tsc_keeps_time() -> bool {
    cfg!(target_arch = "x86_64")
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|s| s.trim() == "tsc")
}

/// How many of the pages under `buf` are not in memory (`mincore`).
#[cfg(test)]
pub fn pages_not_resident(buf: &[u8]) -> io::Result<usize> {
    let page = page_size() as usize;
    let start = buf.as_ptr() as usize & !(page - 1);
    let len = buf.as_ptr() as usize + buf.len() - start;
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: `start` is the page holding `buf`'s first byte and the range ends with
    // `buf`; mincore writes one byte per page of it into `resident`, which holds that many.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, resident.as_mut_ptr()) };
    cvt(rc)?;
    Ok(resident.iter().filter(|&&r| r & 1 == 0).count())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn tcp_info_layout_matches_the_kernel() {
        // Offsets fixed by the kernel ABI: total_retrans at 100, pacing_rate at 104,
        // min_rtt at 148, delivery_rate at 160, snd_wnd at 228.
        assert_eq!(std::mem::offset_of!(TcpInfo, total_retrans), 100);
        assert_eq!(std::mem::offset_of!(TcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(TcpInfo, min_rtt_us), 148);
        assert_eq!(std::mem::offset_of!(TcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(TcpInfo, snd_wnd), 228);
    }

    #[test]
    fn tcp_info_and_mtu_on_a_real_connection() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let (info, len) = tcp_info(client.as_fd()).unwrap();
        assert!(len >= 104, "kernel filled only {len} bytes");
        assert_eq!(info.state, 1, "TCP_ESTABLISHED");
        assert!(info.snd_mss > 0 && info.snd_cwnd > 0);
        // The route MTU of lo, capped at IP_MAX_MTU (65535) as the kernel reports it.
        let lo: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(
            path_mtu(client.as_fd(), false).unwrap(),
            lo.min(65535),
            "loopback MTU"
        );
    }
}
