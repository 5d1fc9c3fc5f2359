/// Errors of the control path: opening ports, creating queues, bad configuration.
///
/// An error has a [`kind`](Error::kind) (what went wrong, and so whose move it is: see
/// [`Error::is_usage`]), a one-line message that says where, and, when the system refused, the
/// system's own error as its [`source`](std::error::Error::source) (`errno` through
/// [`Error::os_error`]).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<std::io::Error>,
}

/// What kind of [`Error`] it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A port spec that does not parse; the message says which part is wrong.
    Spec,
    /// A configuration value out of range, or options that do not go together.
    Config,
    /// Buffer or ring memory could not be mapped.
    Memory,
    /// The device refused or does not exist.
    Device,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn spec(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Spec, message)
    }

    pub(crate) fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Config, message)
    }

    pub(crate) fn memory(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Memory, message)
    }

    pub(crate) fn device(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Device, message)
    }

    /// Keeps the system's error that caused this one (its errno stays readable). The message
    /// says what it means where it happened (and usually repeats it, as the tools print only
    /// the message).
    pub(crate) fn caused_by(mut self, source: std::io::Error) -> Error {
        self.source = Some(source);
        self
    }

    /// What kind of error it is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message without the kind's prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The errno the system answered with, where the error came from a system call: the first
    /// one in the chain of [`source`](std::error::Error::source)s.
    pub fn os_error(&self) -> Option<i32> {
        let mut next = std::error::Error::source(self);
        while let Some(e) = next {
            if let Some(errno) = e
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::raw_os_error)
            {
                return Some(errno);
            }
            next = e.source();
        }
        None
    }

    /// Whether the caller asked for something malformed or out of range (a command to change),
    /// rather than the system refusing or failing (a machine to look at). The tools exit 2 for the
    /// first and 1 for the second.
    pub fn is_usage(&self) -> bool {
        // No wildcard: a new kind of error has to be placed on one side or the other.
        match self.kind {
            ErrorKind::Spec | ErrorKind::Config => true,
            ErrorKind::Device | ErrorKind::Memory => false,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = match self.kind {
            ErrorKind::Spec => "bad port spec",
            ErrorKind::Config => "bad configuration",
            ErrorKind::Memory => "cannot map packet memory",
            ErrorKind::Device => "device error",
        };
        write!(f, "{prefix}: {}", self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}
