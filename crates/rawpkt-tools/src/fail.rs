//! Why a tool stopped, and so its exit status. The rule (also in each tool's `--help`), so that
//! a script can tell "change the command" from "something on this machine said no":
//!
//! * 2, a usage mistake: clap or the tool rejected a value, options that do not go together, or
//!   rawpkt rejected a port spec as malformed (`ErrorKind::Spec`) or a value as out of range
//!   (`ErrorKind::Config`, e.g. more queues than the port has).
//! * 1, a failure: the command is well formed but the system refused or broke: `ErrorKind::Device`
//!   (no such device, interface or namespace; not permitted), `ErrorKind::Memory`, a file that
//!   cannot be read or written, a queue that failed while running, a thread that panicked.

use std::fmt;

/// The rule above in one paragraph, for `--help` (`after_help`): `tool` names the program in the
/// pipe example, `failures` lists what else counts as a failure for it ("" for nothing more).
pub fn exit_status(tool: &str, failures: &str) -> String {
    format!(
        "Exit status: 0 done (also after Ctrl-C); 2 a usage mistake: a bad or missing value, options \
that do not go together, a port spec rawpkt rejects as malformed or out of range; 1 a failure: a \
device, interface, namespace or file that is missing or not permitted, no packet memory, a queue \
that failed while running{failures}. A closed standard output ({tool} | head -1) stops the run and \
ends {tool} by SIGPIPE, quietly, as any Unix filter."
    )
}

/// An error line and whose mistake it is (see the module documentation).
#[derive(Clone, Debug)]
pub enum Fail {
    Usage(String),
    Runtime(String),
}

impl Fail {
    /// `what: e`, with rawpkt's kind of error deciding whose mistake it is (a setting of the
    /// environment that is wrong is the user's).
    pub fn rawpkt(what: impl fmt::Display, e: impl Into<OpenError>) -> Fail {
        let e = e.into();
        let msg = format!("{what}: {e}");
        if e.is_usage() {
            Fail::Usage(msg)
        } else {
            Fail::Runtime(msg)
        }
    }

    /// The same error with `what: ` in front.
    pub fn within(self, what: impl fmt::Display) -> Fail {
        match self {
            Fail::Usage(m) => Fail::Usage(format!("{what}: {m}")),
            Fail::Runtime(m) => Fail::Runtime(format!("{what}: {m}")),
        }
    }

    /// The process exit status.
    pub fn code(&self) -> u8 {
        match self {
            Fail::Usage(_) => 2,
            Fail::Runtime(_) => 1,
        }
    }
}

/// Why a tool could not open a port: a setting the environment gives is wrong (one line naming
/// the variable), or the library refused.
#[derive(Debug)]
pub enum OpenError {
    /// A `RAWPKT_*` variable (`crate::env`).
    Env(String),
    /// The library's error.
    Port(rawpkt::Error),
}

impl OpenError {
    /// Whether the caller's input is to change (exit 2).
    pub fn is_usage(&self) -> bool {
        match self {
            OpenError::Env(_) => true,
            OpenError::Port(e) => e.is_usage(),
        }
    }
}

impl From<rawpkt::Error> for OpenError {
    fn from(e: rawpkt::Error) -> OpenError {
        OpenError::Port(e)
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Env(m) => f.write_str(m),
            OpenError::Port(e) => write!(f, "{e}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_error_is_a_usage_mistake_and_a_device_error_a_failure() {
        let usage = Fail::rawpkt("--port x", rawpkt::open("x").unwrap_err());
        let opts = rawpkt::PortOptions::default().rdma_core(Some(rawpkt::LibPaths {
            ibverbs: "/nonexistent/libibverbs.so.1".into(),
            mlx5: "/nonexistent/libmlx5.so.1".into(),
        }));
        let device = Fail::rawpkt("--port y", rawpkt::open_with("mlx5:mlx5_0/1", &opts).unwrap_err());
        assert_eq!((usage.code(), device.code()), (2, 1));
        assert_eq!(
            usage.within("core 3").to_string(),
            "core 3: --port x: bad port spec: `x` has no kind; expected KIND:NAME, e.g. model:pair0/0"
        );
    }
}
