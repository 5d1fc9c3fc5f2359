//! Files named by the user (a stream file, a trace, rdma-core's libraries), opened so that
//! nothing waits on them: a FIFO with no writer blocks `open(2)` for reading until one comes, one
//! with no reader blocks it for writing, `/dev/zero` and `/dev/urandom` never end, and `dlopen`
//! of a FIFO waits in the loader. Only regular files are taken; anything else is refused at once,
//! before a byte is read, with an error that says what the path names ([`not_regular`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The error a path that names no regular file gives: what it names instead.
#[derive(Debug)]
pub struct NotRegular {
    pub kind: &'static str,
}

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "is a {}, not a regular file", self.kind)
    }
}

impl std::error::Error for NotRegular {}

/// The error a file longer than its reader's limit gives: its length, or as much of it as was
/// read when it grew (or came from a pipe).
#[derive(Debug)]
pub struct TooLarge {
    pub len: u64,
    pub max: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "longer than {} bytes", self.max)
    }
}

impl std::error::Error for TooLarge {}

/// What a file type is, in the words of the messages.
pub fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_file() {
        "regular file"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_dir() {
        "directory"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

fn refuse(kind: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, NotRegular { kind })
}

/// The first error of type `T` in `e` or the errors it carries (`io::Error`'s inner error, and
/// `source()`s: `sys::context` puts words in front of an error this way).
fn find<T: std::error::Error + 'static>(e: &io::Error) -> Option<&T> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = e.get_ref().map(|i| i as _);
    while let Some(x) = next {
        if let Some(t) = x.downcast_ref::<T>() {
            return Some(t);
        }
        next = match x.downcast_ref::<io::Error>() {
            Some(io) => io.get_ref().map(|i| i as _),
            None => x.source(),
        };
    }
    None
}

/// What `e` says the path named, when it was refused for not being a regular file (by any
/// function of this module): a mistake in what the user named, not the system's failure.
pub fn not_regular(e: &io::Error) -> Option<&'static str> {
    find::<NotRegular>(e).map(|n| n.kind)
}

/// Whether `e` is this module's refusal of a file: not a regular file, or too long.
pub fn refused(e: &io::Error) -> bool {
    find::<NotRegular>(e).is_some() || find::<TooLarge>(e).is_some()
}

/// Opens the regular file at `path` for reading; anything else is refused ([`not_regular`])
/// without waiting: `O_NONBLOCK` makes opening a FIFO that has no writer return at once
/// (fifo(7)), and the type is checked on the descriptor opened, so nothing can swap the path
/// in between. On a regular file `O_NONBLOCK` changes nothing (open(2)).
pub fn open_read(path: &Path) -> io::Result<File> {
    let f = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(refuse(kind_of(t)));
    }
    Ok(f)
}

/// Reads the regular file at `path` whole if it has at most `max` bytes; a longer one is
/// refused ([`TooLarge`]) without reading it, and one that grows while it is read is read up to
/// `max + 1` bytes and refused.
pub fn read_at_most(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let f = open_read(path)?;
    let len = f.metadata()?.len();
    if len > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, TooLarge { len, max }));
    }
    let mut data = Vec::with_capacity(len as usize);
    f.take(max.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            TooLarge {
                len: data.len() as u64,
                max,
            },
        ));
    }
    Ok(data)
}

/// Creates (or truncates) the regular file at `path` for writing; anything else is refused
/// ([`not_regular`]) without waiting and without truncating it: `O_NONBLOCK` makes opening a
/// FIFO that has no reader fail at once with ENXIO (fifo(7)), and the file is truncated only
/// once the descriptor is known to be a regular file's.
pub fn create_write(path: &Path) -> io::Result<File> {
    let f = match File::options()
        .write(true)
        .create(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(refuse("FIFO")),
        Err(e) => return Err(e),
    };
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(refuse(kind_of(t)));
    }
    f.set_len(0)?;
    Ok(f)
}

/// Checks that `path` names a regular file (following symbolic links), for a file another
/// program opens by name (`dlopen`), where nothing can be opened first without waiting.
pub fn check_regular(path: &Path) -> io::Result<()> {
    let t = std::fs::metadata(path)?.file_type();
    if t.is_file() {
        Ok(())
    } else {
        Err(refuse(kind_of(t)))
    }
}

/// Reads standard input to its end, up to `max` bytes (one more is refused as [`TooLarge`]),
/// waiting for it at most a tenth of a second at a time so that `stop` (Ctrl-C, SIGTERM) ends
/// the wait: a terminal or a pipe whose writer is slow may take any time. Stopped, it is
/// [`io::ErrorKind::Interrupted`].
pub fn read_stdin_at_most(max: u64, stop: &AtomicBool) -> io::Result<Vec<u8>> {
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        let mut p = libc::pollfd {
            fd: libc::STDIN_FILENO,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd that lives across the call, and its count.
        let ready = unsafe { libc::poll(&mut p, 1, 100) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if ready == 0 {
            continue;
        }
        // SAFETY: reads at most `chunk.len()` bytes into `chunk`, which lives across the call;
        // poll said the read will not wait (data, the end, or an error).
        let n = unsafe { libc::read(libc::STDIN_FILENO, chunk.as_mut_ptr().cast(), chunk.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => continue,
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Ok(data);
        }
        data.extend_from_slice(&chunk[..n as usize]);
        if data.len() as u64 > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                TooLarge {
                    len: data.len() as u64,
                    max,
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    struct Temp(std::path::PathBuf);

    impl Temp {
        fn new(tag: &str) -> Temp {
            let p = std::env::temp_dir().join(format!("rawpkt-file-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_file(&p);
            Temp(p)
        }

        fn fifo(tag: &str) -> Temp {
            let t = Temp::new(tag);
            let c = std::ffi::CString::new(t.0.to_str().unwrap()).unwrap();
            // SAFETY: a NUL-terminated path that lives across the call.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            t
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Each refusal comes at once: a FIFO with no writer or reader, endless devices, a directory.
    #[test]
    fn what_is_not_a_regular_file_is_refused_at_once() {
        let fifo = Temp::fifo("fifo");
        let start = Instant::now();
        for (path, kind) in [
            (fifo.0.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (Path::new("/dev/urandom"), "character device"),
            (Path::new("/"), "directory"),
        ] {
            let e = read_at_most(path, 1 << 20).unwrap_err();
            assert_eq!(not_regular(&e), Some(kind), "{path:?}: {e}");
            assert_eq!(e.to_string(), format!("is a {kind}, not a regular file"));
            assert_eq!(not_regular(&check_regular(path).unwrap_err()), Some(kind));
        }
        let e = create_write(&fifo.0).unwrap_err();
        assert_eq!(not_regular(&e), Some("FIFO"), "{e}");
        assert_eq!(
            not_regular(&create_write(Path::new("/dev/null")).unwrap_err()),
            Some("character device")
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        // A missing file is the system's error, not a refusal.
        let e = read_at_most(Path::new("/nonexistent/x"), 10).unwrap_err();
        assert_eq!((e.kind(), refused(&e)), (io::ErrorKind::NotFound, false));
    }

    #[test]
    fn regular_files_are_read_up_to_the_limit_and_created_truncated() {
        let t = Temp::new("reg");
        std::fs::write(&t.0, b"0123456789").unwrap();
        assert_eq!(read_at_most(&t.0, 10).unwrap(), b"0123456789");
        let e = read_at_most(&t.0, 9).unwrap_err();
        assert!(refused(&e) && not_regular(&e).is_none(), "{e}");
        assert_eq!(e.to_string(), "longer than 9 bytes");
        drop(create_write(&t.0).unwrap());
        assert_eq!(std::fs::read(&t.0).unwrap(), b"");
        check_regular(&t.0).unwrap();
    }
}
