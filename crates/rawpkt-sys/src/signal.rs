//! Ctrl-C and SIGTERM as a flag a busy-polling loop can check between bursts, and standard output
//! for tools that run until stopped: a reader that goes away (`pktgen | head -1`) stops the run
//! the same way, in order, instead of a panic in `println!`.
#![allow(unsafe_code)]

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// errno of the first write to stdout that failed; 0 while every write succeeded.
static STDOUT_ERRNO: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Installs SIGINT and SIGTERM handlers that set the returned flag (once per process).
pub fn stop_flag() -> &'static AtomicBool {
    INSTALL.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction is plain data; zero is a valid start. The handler only performs
            // an atomic store, which is async-signal-safe, and lives for the whole program.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    });
    &STOP
}

/// Whether Ctrl-C or SIGTERM came (or a closed stdout stopped the run), without installing the
/// handlers: for the library's own waits, which end when the tool around them is stopping.
pub fn stopping() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Writes `args` and a newline to stdout. Rust ignores SIGPIPE, so a reader that has gone makes
/// the write fail with EPIPE, on which `println!` panics; here the first failure (of any kind)
/// sets the stop flag, as Ctrl-C does, so that the tool's loops stop and tear down in order, and
/// every later line is dropped. [`finish_stdout`] then ends the process as the failure says.
pub fn print_line(args: fmt::Arguments<'_>) {
    if STDOUT_ERRNO.load(Ordering::Relaxed) != 0 {
        return;
    }
    let mut out = io::stdout().lock();
    // Stdout is line buffered: the newline writes the line out, so a failure shows here.
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        let _ = STDOUT_ERRNO.compare_exchange(0, errno, Ordering::Relaxed, Ordering::Relaxed);
        STOP.store(true, Ordering::Relaxed);
    }
}

/// Writes `args` and a newline to stderr. A failure is ignored: there is nowhere left to report
/// it, and a message that cannot be shown is no reason to stop a run.
pub fn eprint_line(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Whether every line written with [`print_line`] so far reached stdout.
pub fn stdout_ok() -> bool {
    STDOUT_ERRNO.load(Ordering::Relaxed) == 0
}

/// For the end of `main`, after the run has stopped and torn down: if stdout's reader went away
/// (EPIPE), ends the process by SIGPIPE, with nothing printed, as a C tool such as `yes` dies
/// in `yes | head`, so that the shell and `set -o pipefail` see the status they see for any
/// Unix filter (128 + 13); git does the same after EPIPE (`write_or_die.c`, `check_pipe`). Any
/// other failure to write stdout (a full disk, say) is returned for the caller to report.
pub fn finish_stdout() -> io::Result<()> {
    let errno = match STDOUT_ERRNO.load(Ordering::Relaxed) {
        0 => return io::stdout().flush(),
        e => e,
    };
    if errno != libc::EPIPE {
        return Err(io::Error::from_raw_os_error(errno));
    }
    // SAFETY: restoring SIGPIPE's default action and raising it in this thread are plain
    // system calls on no memory of ours; the default action ends the process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Unreachable unless SIGPIPE is blocked: exit with the status the shell would have shown.
    std::process::exit(128 + libc::SIGPIPE)
}

/// `println!` for tools that run until stopped: see [`print_line`].
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::signal::print_line(::std::format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: see [`eprint_line`].
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::signal::eprint_line(::std::format_args!($($arg)*))
    };
}

/// Sets its flag when dropped: on every way out of a scope, unwinding from a panic included, so
/// that threads polling the flag stop instead of running on beside a thread that died (a scope
/// that panics joins its threads, and would wait for them forever). To set it only on a panic,
/// `std::mem::forget` the guard on the normal way out.
pub struct SetOnDrop<'a>(pub &'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Polls `halt` for up to 30 s, as a forwarding loop does.
    fn spin_until(halt: &AtomicBool, start: Instant) {
        while !halt.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
            std::thread::yield_now();
        }
    }

    /// A scope ends promptly when its body or one of its threads panics, as long as each holds a
    /// guard: without them the scope joins threads that poll a flag nobody sets.
    #[test]
    fn a_panic_in_a_scope_stops_its_threads() {
        for body_panics in [true, false] {
            let halt = AtomicBool::new(false);
            let start = Instant::now();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                std::thread::scope(|s| {
                    s.spawn(|| spin_until(&halt, start));
                    if body_panics {
                        let _halt = SetOnDrop(&halt);
                        panic!("the scope's body");
                    }
                    s.spawn(|| {
                        let _halt = SetOnDrop(&halt);
                        panic!("a worker");
                    });
                    spin_until(&halt, start);
                });
            }));
            assert!(r.is_err(), "the panic comes out of the scope");
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "body_panics {body_panics}: the scope waited for its threads"
            );
        }
    }
}
