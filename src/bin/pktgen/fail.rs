//! Why pktgen stopped, and so its exit status. The rule (also in `--help`), so that a script can
//! tell "change the command" from "something on this machine said no":
//!
//! * 2, a usage mistake: clap or `Config` rejected a value, options that do not go together, or
//!   rawpkt rejected a port spec as malformed (`Error::Spec`) or a value as out of range
//!   (`Error::Config`, e.g. more queues than the port has).
//! * 1, a failure: the command is well formed but the system refused or broke: `Error::Device`
//!   (no such device, interface or namespace; not permitted), `Error::Memory`, a file that
//!   cannot be read or written, a queue that failed while sending, a thread that panicked, or,
//!   with a receive port, frames sent and none received (ping's 1 for "no reply at all").

use std::fmt;

pub const EXIT_STATUS: &str = "Exit status: 0 done (also after Ctrl-C); 2 a usage mistake: a bad \
or missing value, options that do not go together, a port spec rawpkt rejects as malformed or out of \
range; 1 a failure: a device, interface, namespace or file that is missing or not permitted, no \
packet memory, a queue that failed while running, or frames sent and not one received (as ping exits \
1 when no reply came). A closed standard output (pktgen | head -1) stops the run and ends pktgen by \
SIGPIPE, quietly, as any Unix filter.";

#[derive(Debug)]
pub enum Fail {
    Usage(String),
    Runtime(String),
}

impl Fail {
    /// `what: e`, with rawpkt's kind of error deciding whose mistake it is.
    pub fn rawpkt(what: impl fmt::Display, e: rawpkt::Error) -> Fail {
        let msg = format!("{what}: {e}");
        if e.is_usage() {
            Fail::Usage(msg)
        } else {
            Fail::Runtime(msg)
        }
    }

    pub fn code(&self) -> u8 {
        match self {
            Fail::Usage(_) => 2,
            Fail::Runtime(_) => 1,
        }
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fail::Usage(m) | Fail::Runtime(m) => f.write_str(m),
        }
    }
}
