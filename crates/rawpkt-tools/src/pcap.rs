//! Classic libpcap capture files (not pcapng): a [`Writer`] for frames the generator receives and
//! a [`Reader`] for traces it replays.
//!
//! Files are written little-endian with nanosecond timestamps (magic `0xa1b23c4d`; the magic tells
//! readers the byte order and resolution), snaplen 65535 and linktype 1 (Ethernet). The reader
//! takes either resolution in either byte order. It loads the whole file and checks every record
//! once when it opens it, so that iterating cannot fail and a truncated capture is reported before
//! a replay starts rather than halfway through it; so it reads only regular files, up to a size
//! the caller sets ([`Reader::open_at_most`]), and never waits on a FIFO or a device.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// A pcapng section header block; the value reads the same in both byte orders.
const MAGIC_PCAPNG: u32 = 0x0a0d_0d0a;
/// Longest frame stored whole; longer ones keep their first `SNAPLEN` bytes and their real length.
pub const SNAPLEN: u32 = 65535;
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Bytes of the file header, and of each record's header.
pub const FILE_HEADER: usize = 24;
pub const RECORD_HEADER: usize = 16;
const NS_PER_S: u64 = 1_000_000_000;
/// Name in the messages of a writer that has no file.
const STREAM: &str = "(stream)";

/// What can go wrong with a capture file; every message starts with the file's path.
#[derive(Debug)]
pub enum PcapError {
    /// The file could not be opened, read, created or written (`op` says which).
    Io {
        path: PathBuf,
        op: &'static str,
        err: io::Error,
    },
    /// Shorter than the 24-byte file header.
    TooShort { path: PathBuf, len: usize },
    /// A FIFO, device, directory or socket: nothing a reader can load whole and check first
    /// (`/dev/zero` never ends, a FIFO blocks until someone writes).
    NotRegular { path: PathBuf, kind: &'static str },
    /// Longer than the caller's limit ([`Reader::open_at_most`]); nothing was read.
    TooLarge { path: PathBuf, len: u64, max: u64 },
    /// A FIFO nobody reads (yet): opening it to write would block until someone does.
    NoReader { path: PathBuf },
    /// The first four bytes (read little-endian) are no pcap magic.
    NotPcap { path: PathBuf, magic: u32 },
    /// Not Ethernet: frames of another link layer cannot be replayed on a NIC port.
    Linktype { path: PathBuf, linktype: u32 },
    /// Record `record` (counted from 1, as Wireshark numbers frames) starts at byte `offset` and
    /// needs `needs` more bytes (its header, or its data after the header) than the `left` there are.
    Truncated {
        path: PathBuf,
        record: usize,
        offset: usize,
        needs: usize,
        left: usize,
    },
}

impl PcapError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            PcapError::Io { path, .. } | PcapError::TooShort { path, .. } | PcapError::NotPcap { path, .. } => path,
            PcapError::Linktype { path, .. } | PcapError::Truncated { path, .. } => path,
            PcapError::NotRegular { path, .. } | PcapError::TooLarge { path, .. } | PcapError::NoReader { path } => {
                path
            }
        }
    }
}

impl std::fmt::Display for PcapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.path().display())?;
        match self {
            PcapError::Io { op, err, .. } => write!(f, "cannot {op}: {err}"),
            PcapError::TooShort { len, .. } => write!(f, "{len} bytes is too short for a pcap file (its header is 24)"),
            PcapError::NotRegular { kind, .. } => {
                write!(
                    f,
                    "is a {kind}, not a regular file; a pcap file to replay must be a file"
                )
            }
            PcapError::TooLarge { len, max, .. } => write!(f, "{len} bytes is more than the {max} allowed"),
            PcapError::NoReader { .. } => f.write_str(
                "is a FIFO that nobody reads; start its reader first (e.g. `tshark -r FIFO`), as writing \
                 would wait for one",
            ),
            PcapError::NotPcap {
                magic: MAGIC_PCAPNG, ..
            } => f.write_str(
                "is a pcapng file (magic 0x0a0d0d0a), which is not supported; convert it to pcap with \
                 `editcap -F pcap IN OUT`",
            ),
            PcapError::NotPcap { magic, .. } => write!(
                f,
                "not a pcap file (magic {magic:#010x}, expected 0xa1b2c3d4 or 0xa1b23c4d in either byte order)"
            ),
            PcapError::Linktype { linktype, .. } => {
                let name = linktype_name(*linktype);
                write!(f, "linktype {linktype} ({name}) is not supported; only 1 (Ethernet) is")
            }
            PcapError::Truncated {
                record,
                offset,
                needs,
                left,
                ..
            } => {
                write!(
                    f,
                    "record {record} at byte {offset} is truncated (needs {needs} bytes, {left} left)"
                )
            }
        }
    }
}

impl std::error::Error for PcapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PcapError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// The link types a capture is most likely to have when it is not Ethernet (tcpdump.org's list).
fn linktype_name(linktype: u32) -> &'static str {
    match linktype {
        0 => "BSD loopback",
        101 => "raw IP",
        105 => "IEEE 802.11",
        113 => "Linux cooked capture",
        127 => "802.11 radiotap",
        228 => "raw IPv4",
        229 => "raw IPv6",
        276 => "Linux cooked capture v2",
        _ => "unknown",
    }
}

/// Writes a pcap file record by record. Call [`Writer::flush`] at the end: a `BufWriter` dropped
/// unflushed still writes its buffer but swallows the error.
pub struct Writer<W: Write> {
    out: W,
    path: PathBuf,
}

/// The file a [`Writer::create`] writes to. A FIFO (or a device) stays non-blocking: a write its
/// reader is not ready for waits a tenth of a second at a time, and gives up once the process
/// is asked to stop (Ctrl-C or SIGTERM, [`rawpkt_sys::signal::stop_flag`]), so that a reader that stops
/// reading cannot keep the writer, and the tool around it, for ever.
pub struct Output {
    file: File,
    /// Not a regular file: writes may find the reader not ready.
    waits: bool,
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match self.file.write(buf) {
                Err(e) if self.waits && e.kind() == io::ErrorKind::WouldBlock => {
                    if rawpkt_sys::signal::stopping() {
                        // Not `Interrupted`, which `write_all` takes as "try again".
                        return Err(io::Error::other("stopped while its reader was not reading"));
                    }
                    let mut p = [libc::pollfd {
                        fd: std::os::fd::AsRawFd::as_raw_fd(&self.file),
                        events: libc::POLLOUT,
                        revents: 0,
                    }];
                    rawpkt_sys::poll(&mut p, 100)?;
                }
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Writer<BufWriter<Output>> {
    /// Creates (or truncates) the file at `path` and writes the file header.
    ///
    /// A FIFO must have its reader already: opening one that has none would wait for it without a
    /// word, so it is refused ([`PcapError::NoReader`]). Devices such as `/dev/null` are fine.
    /// A FIFO's reader that stops reading holds writes up until the process is asked to stop
    /// ([`Output`]).
    pub fn create(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        let path = path.as_ref().to_path_buf();
        let io = |err| PcapError::Io {
            path: path.clone(),
            op: "create",
            err,
        };
        // O_NONBLOCK: opening a FIFO for writing with no reader fails at once with ENXIO instead
        // of waiting (fifo(7)); on a regular file it changes nothing (open(2)).
        let f = match File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(PcapError::NoReader { path }),
            Err(e) => return Err(io(e)),
        };
        // Anything but a regular file stays O_NONBLOCK: a slow reader makes writes wait in
        // `Output`, where a stop can end the wait, rather than in write(2), where it cannot.
        let waits = !f.metadata().is_ok_and(|m| m.is_file());
        Writer::start(BufWriter::new(Output { file: f, waits }), path)
    }
}

impl<W: Write> Writer<W> {
    /// Writes the file header to `w`.
    pub fn new(w: W) -> Result<Self, PcapError> {
        Writer::start(w, PathBuf::from(STREAM))
    }

    fn start(out: W, path: PathBuf) -> Result<Self, PcapError> {
        let mut w = Writer { out, path };
        let mut h = [0u8; FILE_HEADER];
        // thiszone and sigfigs (bytes 8..16) stay 0, as every modern writer leaves them.
        h[0..4].copy_from_slice(&MAGIC_NS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.out.write_all(&h).map_err(|e| w.err(e))?;
        Ok(w)
    }

    /// Appends one frame received at `ts_ns` (nanoseconds since the Unix epoch).
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), PcapError> {
        let Ok(sec) = u32::try_from(ts_ns / NS_PER_S) else {
            let msg = format!("timestamp {ts_ns} ns is past 2106, beyond pcap's 32-bit seconds");
            return Err(self.err(io::Error::new(io::ErrorKind::InvalidInput, msg)));
        };
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        let mut h = [0u8; RECORD_HEADER];
        for (field, v) in h.chunks_exact_mut(4).zip([sec, (ts_ns % NS_PER_S) as u32, incl, orig]) {
            field.copy_from_slice(&v.to_le_bytes());
        }
        let r = self
            .out
            .write_all(&h)
            .and_then(|()| self.out.write_all(&frame[..incl as usize]));
        r.map_err(|e| self.err(e))
    }

    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.out.flush().map_err(|e| self.err(e))
    }

    /// Flushes and hands back the sink (the bytes, for a `Vec<u8>`).
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.flush()?;
        Ok(self.out)
    }

    fn err(&self, err: io::Error) -> PcapError {
        PcapError::Io {
            path: self.path.clone(),
            op: "write",
            err,
        }
    }
}

/// Where one record's frame lies in the file, found when the file was opened.
struct Record {
    ts_ns: u64,
    start: usize,
    end: usize,
}

/// A whole pcap file in memory, every record checked.
pub struct Reader {
    path: PathBuf,
    data: Vec<u8>,
    records: Vec<Record>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("path", &self.path)
            .field("records", &self.records.len())
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl Reader {
    /// Reads and checks the regular file at `path` (see [`Reader::open_at_most`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Reader, PcapError> {
        Reader::open_at_most(path, u64::MAX)
    }

    /// Reads and checks the file at `path` if it is a regular file of at most `max` bytes. A
    /// FIFO, device, directory or socket is refused ([`PcapError::NotRegular`]) without reading
    /// or waiting for it, a longer file ([`PcapError::TooLarge`]) without reading it; a file that
    /// grows while it is read is read up to `max + 1` bytes and refused.
    pub fn open_at_most(path: impl AsRef<Path>, max: u64) -> Result<Reader, PcapError> {
        let path = path.as_ref().to_path_buf();
        let io = |err| PcapError::Io {
            path: path.clone(),
            op: "read",
            err,
        };
        // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one
        // (fifo(7)); the file type is checked next, before anything is read.
        let f = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(io)?;
        let meta = f.metadata().map_err(io)?;
        let t = meta.file_type();
        if !t.is_file() {
            let kind = if t.is_fifo() {
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
            };
            return Err(PcapError::NotRegular { path, kind });
        }
        if meta.len() > max {
            return Err(PcapError::TooLarge {
                path,
                len: meta.len(),
                max,
            });
        }
        let mut data = Vec::with_capacity(meta.len() as usize);
        f.take(max.saturating_add(1)).read_to_end(&mut data).map_err(io)?;
        if data.len() as u64 > max {
            return Err(PcapError::TooLarge {
                path,
                len: data.len() as u64,
                max,
            });
        }
        Reader::from_bytes(path, data)
    }

    /// Parses a file already in memory; `name` is what the error messages call it.
    pub fn from_bytes(name: impl Into<PathBuf>, data: Vec<u8>) -> Result<Reader, PcapError> {
        let path = name.into();
        let Some(h) = data.first_chunk::<FILE_HEADER>() else {
            return Err(PcapError::TooShort { path, len: data.len() });
        };
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (big_endian, frac_ns) = match magic {
            MAGIC_US => (false, 1000),
            MAGIC_NS => (false, 1),
            m if m == MAGIC_US.swap_bytes() => (true, 1000),
            m if m == MAGIC_NS.swap_bytes() => (true, 1),
            _ => return Err(PcapError::NotPcap { path, magic }),
        };
        // Only called on 4 bytes known to be in the file.
        let word = |b: &[u8]| {
            let b = [b[0], b[1], b[2], b[3]];
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let linktype = word(&h[20..24]);
        if linktype != LINKTYPE_ETHERNET {
            return Err(PcapError::Linktype { path, linktype });
        }
        let mut records = Vec::new();
        let mut at = FILE_HEADER;
        while at < data.len() {
            let truncated = |needs: usize, left: usize| PcapError::Truncated {
                path: path.clone(),
                record: records.len() + 1,
                offset: at,
                needs,
                left,
            };
            let left = data.len() - at;
            if left < RECORD_HEADER {
                return Err(truncated(RECORD_HEADER, left));
            }
            let r = &data[at..at + RECORD_HEADER];
            // A corrupt incl_len can be up to 4 GiB: compared with what is left, never added to `at`
            // before that, so nothing overflows.
            let incl = word(&r[8..12]) as usize;
            let left = left - RECORD_HEADER;
            if incl > left {
                return Err(truncated(incl, left));
            }
            // At most 2^32 * 10^9 + 2^32 * 1000 < 2^64: a corrupt fraction cannot overflow either.
            let ts_ns = u64::from(word(&r[0..4])) * NS_PER_S + u64::from(word(&r[4..8])) * frac_ns;
            let start = at + RECORD_HEADER;
            records.push(Record {
                ts_ns,
                start,
                end: start + incl,
            });
            at = start + incl;
        }
        Ok(Reader { path, data, records })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Record `i` (from 0) as (timestamp in ns, frame bytes), without copying.
    pub fn get(&self, i: usize) -> Option<(u64, &[u8])> {
        self.records.get(i).map(|r| (r.ts_ns, &self.data[r.start..r.end]))
    }

    /// Every record as (timestamp in ns, frame bytes), without copying.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, &[u8])> + '_ {
        // The ranges were checked against this very buffer, which the reader never changes.
        self.records.iter().map(|r| (r.ts_ns, &self.data[r.start..r.end]))
    }

    /// Copies of every frame, for callers that outlive the reader.
    pub fn frames(&self) -> Vec<Vec<u8>> {
        self.iter().map(|(_, f)| f.to_vec()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A file under the temp dir, unique per process and test, removed even when the test fails.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(tag: &str) -> TempFile {
            TempFile(std::env::temp_dir().join(format!("rawpkt-pcap-{}-{tag}.pcap", std::process::id())))
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Frame `i`: `len` bytes, broadcast Ethernet with a local-experimental EtherType, then a pattern.
    fn frame(i: usize, len: usize) -> Vec<u8> {
        let mut f: Vec<u8> = (0..len).map(|b| (b + i) as u8).collect();
        f[..14].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
        f
    }

    fn sample() -> Vec<(u64, Vec<u8>)> {
        (0..3)
            .map(|i| (1_700_000_000_123_456_789 + i as u64 * 1001, frame(i, 60 + 40 * i)))
            .collect()
    }

    fn to_bytes(recs: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        for (ts, f) in recs {
            w.write(*ts, f).unwrap();
        }
        w.into_inner().unwrap()
    }

    #[test]
    fn round_trip_in_memory() {
        let recs = sample();
        let bytes = to_bytes(&recs);
        assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        let r = Reader::from_bytes("mem", bytes).unwrap();
        assert_eq!(r.len(), 3);
        let got: Vec<(u64, Vec<u8>)> = r.iter().map(|(t, f)| (t, f.to_vec())).collect();
        assert_eq!(got, recs);
        assert_eq!(r.frames()[2], recs[2].1);
        assert!(Reader::from_bytes("empty", to_bytes(&[])).unwrap().is_empty());
    }

    #[test]
    fn round_trip_through_a_file_truncating_past_snaplen() {
        let tmp = TempFile::new("file");
        let mut w = Writer::create(&tmp.0).unwrap();
        w.write(5, &frame(0, 1514)).unwrap();
        w.write(6, &frame(1, 70_000)).unwrap();
        w.flush().unwrap();
        drop(w);
        let r = Reader::open(&tmp.0).unwrap();
        let got: Vec<_> = r.iter().collect();
        assert_eq!(got[0], (5, &frame(0, 1514)[..]));
        assert_eq!(got[1], (6, &frame(1, 70_000)[..SNAPLEN as usize]));
        // The second record's orig_len keeps the real length, as libpcap writes it.
        let orig = 24 + 16 + 1514 + 12;
        assert_eq!(std::fs::read(&tmp.0).unwrap()[orig..orig + 4], 70_000u32.to_le_bytes());
    }

    #[test]
    fn reads_big_endian_microseconds() {
        let mut b = vec![
            0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1,
        ];
        b.extend_from_slice(&[0, 0, 0, 7, 0x00, 0x07, 0xa1, 0x20, 0, 0, 0, 60, 0, 0, 0, 64]);
        b.extend_from_slice(&frame(9, 60));
        let r = Reader::from_bytes("be.pcap", b).unwrap();
        assert_eq!(r.get(0), Some((7_500_000_000, &frame(9, 60)[..])));
        assert_eq!(r.get(1), None);
    }

    #[test]
    fn every_truncation_is_an_error_or_a_shorter_valid_file() {
        let recs = sample();
        let bytes = to_bytes(&recs);
        // A cut exactly between records leaves a valid file: pcap keeps no record count.
        let mut boundaries = vec![24];
        for (_, f) in &recs {
            boundaries.push(boundaries.last().unwrap() + 16 + f.len());
        }
        for cut in 0..bytes.len() {
            match Reader::from_bytes("cut.pcap", bytes[..cut].to_vec()) {
                Ok(r) => assert_eq!(boundaries.get(r.len()), Some(&cut), "cut at {cut} read as valid"),
                Err(PcapError::TooShort { len, .. }) => assert!(len < 24 && len == cut),
                Err(e @ PcapError::Truncated { .. }) => {
                    assert!(!boundaries.contains(&cut), "cut at {cut}: {e}");
                    assert!(e.to_string().starts_with("cut.pcap: record "), "{e}");
                }
                Err(e) => panic!("cut at {cut}: unexpected {e}"),
            }
        }
        let e = Reader::from_bytes("x.pcap", bytes[..24 + 16 + 50].to_vec()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.pcap: record 1 at byte 24 is truncated (needs 60 bytes, 50 left)"
        );
        // A corrupt incl_len of 4 GiB - 1 is a truncation, not an overflow or a huge allocation.
        let mut corrupt = bytes.clone();
        corrupt[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = Reader::from_bytes("c.pcap", corrupt).unwrap_err().to_string();
        assert!(
            e.contains("record 1 at byte 24 is truncated (needs 4294967295 bytes"),
            "{e}"
        );
    }

    /// Runs `f` on its own thread and fails the test if it has not returned within 10 s: what
    /// it checks used to block forever.
    fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what}: still blocked after 10 s"))
    }

    fn mkfifo(tag: &str) -> TempFile {
        let t = TempFile::new(tag);
        let _ = std::fs::remove_file(&t.0);
        let ok = Command::new("mkfifo").arg(&t.0).status().is_ok_and(|s| s.success());
        assert!(ok, "mkfifo {}", t.0.display());
        t
    }

    #[test]
    fn only_regular_files_are_read_and_never_waited_for() {
        let e = within_10s("/dev/zero", || Reader::open("/dev/zero").unwrap_err().to_string());
        assert_eq!(
            e,
            "/dev/zero: is a character device, not a regular file; a pcap file to replay must be a file"
        );
        // A FIFO with no writer: opening it to read would wait for one.
        let fifo = mkfifo("fifo-in");
        let p = fifo.0.clone();
        let e = within_10s("a FIFO with no writer", move || Reader::open(&p).unwrap_err());
        assert!(matches!(e, PcapError::NotRegular { kind: "FIFO", .. }), "{e}");
        let dir = std::env::temp_dir();
        let e = Reader::open(&dir).unwrap_err();
        assert!(matches!(e, PcapError::NotRegular { kind: "directory", .. }), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_unread() {
        let tmp = TempFile::new("limit");
        std::fs::write(&tmp.0, to_bytes(&sample())).unwrap();
        let len = std::fs::metadata(&tmp.0).unwrap().len();
        assert_eq!(Reader::open_at_most(&tmp.0, len).unwrap().len(), 3);
        let e = Reader::open_at_most(&tmp.0, len - 1).unwrap_err();
        assert!(
            matches!(e, PcapError::TooLarge { len: l, max, .. } if l == len && max == len - 1),
            "{e}"
        );
        assert!(
            e.to_string()
                .ends_with(&format!("{len} bytes is more than the {} allowed", len - 1)),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_is_written_only_with_its_reader_there() {
        let fifo = mkfifo("fifo-out");
        let p = fifo.0.clone();
        let e = within_10s("a FIFO with no reader", move || Writer::create(&p).err());
        let e = e.expect("a FIFO nobody reads is refused");
        assert!(matches!(e, PcapError::NoReader { .. }), "{e}");
        assert!(e.to_string().contains("is a FIFO that nobody reads"), "{e}");
        // With a reader, the capture goes through the FIFO whole.
        let p = fifo.0.clone();
        let reader = std::thread::spawn(move || std::fs::read(p).unwrap());
        let p = fifo.0.clone();
        within_10s("a FIFO with a reader", move || {
            // The reader may not have opened its end yet.
            let mut w = loop {
                match Writer::create(&p) {
                    Ok(w) => break w,
                    Err(PcapError::NoReader { .. }) => std::thread::sleep(std::time::Duration::from_millis(5)),
                    Err(e) => panic!("{e}"),
                }
            };
            for (ts, f) in sample() {
                w.write(ts, &f).unwrap();
            }
            w.flush().unwrap();
        });
        let got = Reader::from_bytes("fifo", reader.join().unwrap()).unwrap();
        assert_eq!(got.frames(), sample().into_iter().map(|(_, f)| f).collect::<Vec<_>>());
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let mut ng = vec![0x0a, 0x0d, 0x0d, 0x0a];
        ng.resize(64, 0);
        let e = Reader::from_bytes("a.pcapng", ng).unwrap_err().to_string();
        assert!(
            e.starts_with("a.pcapng: is a pcapng file") && e.contains("not supported"),
            "{e}"
        );
        let e = Reader::from_bytes("z.bin", [0x50u8, 0x4b, 3, 4].repeat(8))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("z.bin: not a pcap file (magic 0x04034b50"), "{e}");
        let mut sll = to_bytes(&sample());
        sll[20..24].copy_from_slice(&113u32.to_le_bytes());
        let e = Reader::from_bytes("sll.pcap", sll).unwrap_err().to_string();
        assert_eq!(
            e,
            "sll.pcap: linktype 113 (Linux cooked capture) is not supported; only 1 (Ethernet) is"
        );
        let e = Reader::open("/nonexistent/rawpkt.pcap").unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/rawpkt.pcap: cannot read: "), "{e}");
        let e = Writer::new(Vec::new())
            .unwrap()
            .write(u64::MAX, &frame(0, 60))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("(stream): cannot write: timestamp"), "{e}");
    }

    /// tshark must read our files as we meant them: lengths and nanosecond timestamps.
    #[test]
    #[ignore = "needs tshark (scripts/test.sh installs it as root)"]
    fn tshark_reads_what_we_write() {
        let installed = Command::new("tshark")
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            installed,
            "tshark is not installed: `apt-get install -y tshark` (scripts/test.sh installs it as root)"
        );
        let tmp = TempFile::new("tshark");
        let mut w = Writer::create(&tmp.0).unwrap();
        let lens: Vec<usize> = (0..100).map(|i| 60 + i * 14).collect();
        for (i, &len) in lens.iter().enumerate() {
            w.write(1_700_000_000_000_000_007 + i as u64 * 1_000_000, &frame(i, len))
                .unwrap();
        }
        w.flush().unwrap();
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&tmp.0)
            .args(["-T", "fields", "-e", "frame.len", "-e", "frame.time_epoch"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 100, "{stdout}");
        for (i, line) in lines.iter().enumerate() {
            let want = format!("{}\t1700000000.{:03}000007", lens[i], i);
            assert_eq!(*line, want, "frame {}", i + 1);
        }
    }
}
