//! Capture files, classic libpcap and pcapng: a [`Writer`] for frames the generator receives and
//! a [`Reader`] for traces it replays.
//!
//! Classic files are written little-endian with nanosecond timestamps (magic `0xa1b23c4d`; the
//! magic tells readers the byte order and resolution), snaplen 65535 and linktype 1 (Ethernet);
//! pcapng files ([`Format::Pcapng`], Wireshark's default format; the IETF draft
//! draft-ietf-opsawg-pcapng) as one section of one Ethernet interface with `if_tsresol` 9
//! (nanoseconds) and an Enhanced Packet Block per frame. The reader takes classic files of either
//! resolution in either byte order, and pcapng files of any number of sections, each in its own
//! byte order, with their interfaces' `if_tsresol` and `if_tsoffset`, reading Enhanced, Simple
//! and (obsolete) Packet Blocks and stepping over every other block. It loads the whole file and
//! checks every record once when it opens it, so that iterating cannot fail and a truncated
//! capture is reported before a replay starts rather than halfway through it; so it reads only
//! regular files, up to a size the caller sets ([`Reader::open_at_most`]), and never waits on a
//! FIFO or a device.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

const MAGIC_US: u32 = 0xa1b2_c3d4;
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// A pcapng section header block; the value reads the same in both byte orders.
const MAGIC_PCAPNG: u32 = 0x0a0d_0d0a;
/// pcapng's byte-order magic, in the section header after the block type and length.
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;
/// pcapng block types read (others are stepped over).
const BLOCK_IDB: u32 = 1;
const BLOCK_PB: u32 = 2;
const BLOCK_SPB: u32 = 3;
const BLOCK_EPB: u32 = 6;
/// Interface options read: the timestamps' resolution and offset.
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;
/// What a pcapng record adds to its frame at most: an Enhanced Packet Block's 28 bytes of
/// header, its 4-byte trailer and 3 bytes of padding (a classic record adds [`RECORD_HEADER`]).
pub const MAX_RECORD_OVERHEAD: usize = 35;

/// The two formats [`Writer`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap, nanosecond timestamps.
    Pcap,
    /// pcapng: one section, one Ethernet interface, nanosecond timestamps (`if_tsresol` 9).
    Pcapng,
}

impl Format {
    /// pcapng for a path ending in `.pcapng` (any case, as Wireshark names its files), else
    /// classic pcap.
    pub fn of_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("pcapng") => Format::Pcapng,
            _ => Format::Pcap,
        }
    }
}
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
    /// A pcapng block that breaks the format (`what` says how), at byte `offset`.
    Block { path: PathBuf, offset: usize, what: String },
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
            PcapError::Linktype { path, .. } | PcapError::Truncated { path, .. } | PcapError::Block { path, .. } => {
                path
            }
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
            PcapError::NotPcap { magic, .. } => write!(
                f,
                "not a pcap file (magic {magic:#010x}, expected 0xa1b2c3d4 or 0xa1b23c4d in either byte order, \
                 or a pcapng section header 0x0a0d0d0a)"
            ),
            PcapError::Block { offset, what, .. } => write!(f, "pcapng block at byte {offset}: {what}"),
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
    format: Format,
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
    /// ([`Output`]). The format is the path's ([`Format::of_path`]): pcapng for `.pcapng`.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        let format = Format::of_path(path.as_ref());
        Writer::create_as(path, format)
    }

    /// [`Writer::create`] in the format given, whatever the path's name.
    pub fn create_as(path: impl AsRef<Path>, format: Format) -> Result<Self, PcapError> {
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
        Writer::start(BufWriter::new(Output { file: f, waits }), path, format)
    }
}

impl<W: Write> Writer<W> {
    /// Writes a classic pcap file header to `w`.
    pub fn new(w: W) -> Result<Self, PcapError> {
        Writer::start(w, PathBuf::from(STREAM), Format::Pcap)
    }

    /// Writes the header of a file of the format given to `w`.
    pub fn new_as(w: W, format: Format) -> Result<Self, PcapError> {
        Writer::start(w, PathBuf::from(STREAM), format)
    }

    /// The format written.
    pub fn format(&self) -> Format {
        self.format
    }

    fn start(out: W, path: PathBuf, format: Format) -> Result<Self, PcapError> {
        let mut w = Writer { out, path, format };
        if format == Format::Pcapng {
            // Section Header Block: byte-order magic, version 1.0, section length unknown (-1),
            // no options. Then one Interface Description Block: Ethernet, snaplen, and
            // if_tsresol = 9 (10^-9 s), padded to 4 bytes, and opt_endofopt.
            let mut b = Vec::with_capacity(28 + 32);
            for v in [MAGIC_PCAPNG, 28, PCAPNG_BOM] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&1u16.to_le_bytes());
            b.extend_from_slice(&0u16.to_le_bytes());
            b.extend_from_slice(&(-1i64).to_le_bytes());
            b.extend_from_slice(&28u32.to_le_bytes());
            for v in [BLOCK_IDB, 32] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_le_bytes());
            b.extend_from_slice(&0u16.to_le_bytes());
            b.extend_from_slice(&SNAPLEN.to_le_bytes());
            b.extend_from_slice(&OPT_IF_TSRESOL.to_le_bytes());
            b.extend_from_slice(&1u16.to_le_bytes());
            b.extend_from_slice(&[9, 0, 0, 0]);
            b.extend_from_slice(&[0, 0, 0, 0]);
            b.extend_from_slice(&32u32.to_le_bytes());
            w.out.write_all(&b).map_err(|e| w.err(e))?;
            return Ok(w);
        }
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
        if self.format == Format::Pcapng {
            return self.write_epb(ts_ns, frame);
        }
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

    /// One Enhanced Packet Block: interface 0, the time in ns (`if_tsresol` 9) as two 32-bit
    /// halves, captured and original lengths, the frame padded to 4 bytes, the length again.
    fn write_epb(&mut self, ts_ns: u64, frame: &[u8]) -> Result<(), PcapError> {
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        let pad = (4 - incl as usize % 4) % 4;
        let total = 32 + incl + pad as u32;
        let mut h = [0u8; 28];
        let words = [BLOCK_EPB, total, 0, (ts_ns >> 32) as u32, ts_ns as u32, incl, orig];
        for (field, v) in h.chunks_exact_mut(4).zip(words) {
            field.copy_from_slice(&v.to_le_bytes());
        }
        let r = self
            .out
            .write_all(&h)
            .and_then(|()| self.out.write_all(&frame[..incl as usize]))
            .and_then(|()| self.out.write_all(&[0u8; 3][..pad]))
            .and_then(|()| self.out.write_all(&total.to_le_bytes()));
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
            let kind = rawpkt_sys::file::kind_of(t);
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
        if magic == MAGIC_PCAPNG {
            let records = pcapng_records(&path, &data)?;
            return Ok(Reader { path, data, records });
        }
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

/// One pcapng interface as its Description Block says: link type, snap length, and what a
/// timestamp's unit is (`if_tsresol`) and adds (`if_tsoffset`, seconds).
struct Interface {
    linktype: u16,
    snaplen: u32,
    resol: u8,
    offset_s: i64,
}

impl Interface {
    /// A timestamp of this interface in ns since the Unix epoch (saturating: a u64 of ns lasts
    /// until 2554). `if_tsresol`: the high bit clear, units of 10^-v s; set, 2^-v s.
    fn ns(&self, ts: u64) -> u64 {
        let v = u32::from(self.resol & 0x7f);
        let ns: u128 = if self.resol & 0x80 != 0 {
            (u128::from(ts) * u128::from(NS_PER_S)) >> v.min(127)
        } else if v <= 9 {
            u128::from(ts) * 10u128.pow(9 - v)
        } else {
            u128::from(ts) / 10u128.pow((v - 9).min(38))
        };
        let ns = ns as i128 + i128::from(self.offset_s) * i128::from(NS_PER_S);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Every packet of a pcapng file, each block checked: its length a multiple of 4, at least 12,
/// within the file and repeated at its end; a packet's interface described before it, Ethernet,
/// and its captured length within its block.
fn pcapng_records(path: &Path, data: &[u8]) -> Result<Vec<Record>, PcapError> {
    let mut records = Vec::new();
    let mut interfaces: Vec<Interface> = Vec::new();
    let mut big_endian = false;
    let mut at = 0;
    let bad = |offset: usize, what: String| PcapError::Block {
        path: path.to_path_buf(),
        offset,
        what,
    };
    while at < data.len() {
        let left = data.len() - at;
        let truncated = |needs: usize| bad(at, format!("truncated (needs {needs} bytes, {left} left)"));
        if left < 12 {
            return Err(truncated(12));
        }
        let b = &data[at..];
        let raw = |i: usize| [b[i], b[i + 1], b[i + 2], b[i + 3]];
        let kind = u32::from_le_bytes(raw(0));
        if kind == MAGIC_PCAPNG {
            // A section header: its byte-order magic says how this section's numbers read.
            big_endian = match u32::from_le_bytes(raw(8)) {
                PCAPNG_BOM => false,
                m if m == PCAPNG_BOM.swap_bytes() => true,
                m => return Err(bad(at, format!("section header with byte-order magic {m:#010x}"))),
            };
            interfaces.clear();
        } else if at == 0 {
            return Err(bad(0, "the file does not start with a section header".into()));
        }
        let word = |i: usize| {
            if big_endian {
                u32::from_be_bytes(raw(i))
            } else {
                u32::from_le_bytes(raw(i))
            }
        };
        let half = |i: usize| {
            let h = [b[i], b[i + 1]];
            if big_endian {
                u16::from_be_bytes(h)
            } else {
                u16::from_le_bytes(h)
            }
        };
        let kind = word(0);
        // Compared with what is left before it is used: a corrupt length cannot overflow.
        let len = word(4) as usize;
        if len < 12 || !len.is_multiple_of(4) {
            return Err(bad(at, format!("block length {len} (at least 12, a multiple of 4)")));
        }
        if len > left {
            return Err(truncated(len));
        }
        if word(len - 4) as usize != len {
            return Err(bad(
                at,
                format!("block length {len} at its start, {} at its end", word(len - 4)),
            ));
        }
        let body = len - 12;
        let short = |needs: usize| {
            bad(
                at,
                format!("block type {kind} of {len} bytes is too short for its {needs}"),
            )
        };
        match kind {
            MAGIC_PCAPNG if body < 16 => return Err(short(28)),
            MAGIC_PCAPNG if half(12) != 1 => {
                return Err(bad(
                    at,
                    format!("section header version {}.{} (1.x is read)", half(12), half(14)),
                ));
            }
            BLOCK_IDB => {
                if body < 8 {
                    return Err(short(20));
                }
                let mut i = Interface {
                    linktype: half(8),
                    snaplen: word(12),
                    resol: 6,
                    offset_s: 0,
                };
                // Options: code, length, value padded to 4 bytes; up to opt_endofopt or the
                // block's end.
                let mut o = 16;
                while o + 4 <= len - 4 {
                    let (code, olen) = (half(o), usize::from(half(o + 2)));
                    if code == 0 {
                        break;
                    }
                    if o + 4 + olen > len - 4 {
                        return Err(bad(
                            at,
                            format!("interface option {code} of {olen} bytes runs past its block"),
                        ));
                    }
                    match (code, olen) {
                        (OPT_IF_TSRESOL, 1) => i.resol = b[o + 4],
                        (OPT_IF_TSOFFSET, 8) => {
                            // A 64-bit integer in the section's byte order: its high half
                            // is the first word when big-endian, the second when not.
                            let (first, second) = (u64::from(word(o + 4)), u64::from(word(o + 8)));
                            let v = if big_endian {
                                first << 32 | second
                            } else {
                                second << 32 | first
                            };
                            i.offset_s = v as i64;
                        }
                        _ => {}
                    }
                    o += 4 + olen.div_ceil(4) * 4;
                }
                if i.resol & 0x7f > if i.resol & 0x80 != 0 { 63 } else { 19 } {
                    return Err(bad(
                        at,
                        format!("if_tsresol {:#04x} is finer than a u64 can count", i.resol),
                    ));
                }
                interfaces.push(i);
            }
            BLOCK_EPB | BLOCK_PB | BLOCK_SPB => {
                let head = match kind {
                    BLOCK_SPB => 4,
                    _ => 20,
                };
                if body < head {
                    return Err(short(12 + head));
                }
                let id = match kind {
                    BLOCK_EPB => word(8) as usize,
                    BLOCK_PB => usize::from(half(8)),
                    _ => 0,
                };
                let Some(ifc) = interfaces.get(id) else {
                    return Err(bad(
                        at,
                        format!("a packet of interface {id}, which no interface block before it describes"),
                    ));
                };
                if ifc.linktype != LINKTYPE_ETHERNET as u16 {
                    return Err(PcapError::Linktype {
                        path: path.to_path_buf(),
                        linktype: u32::from(ifc.linktype),
                    });
                }
                let (incl, ts_ns) = if kind == BLOCK_SPB {
                    // No captured length and no time: the original length cut to the snap
                    // length and to the block, and the time of the packet before it (a
                    // replay sends it right after that one).
                    let orig = word(8) as usize;
                    let snap = if ifc.snaplen == 0 {
                        usize::MAX
                    } else {
                        ifc.snaplen as usize
                    };
                    (
                        orig.min(snap).min(body - head),
                        records.last().map_or(0, |r: &Record| r.ts_ns),
                    )
                } else {
                    let ts = u64::from(word(12)) << 32 | u64::from(word(16));
                    (word(20) as usize, ifc.ns(ts))
                };
                if incl > body - head {
                    return Err(PcapError::Truncated {
                        path: path.to_path_buf(),
                        record: records.len() + 1,
                        offset: at,
                        needs: incl,
                        left: body - head,
                    });
                }
                let start = at + 8 + head;
                records.push(Record {
                    ts_ns,
                    start,
                    end: start + incl,
                });
            }
            _ => {}
        }
        at += len;
    }
    Ok(records)
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
        assert_eq!(
            e,
            "a.pcapng: pcapng block at byte 0: section header with byte-order magic 0x00000000"
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

    /// A pcapng block of `kind` around `body` (padded to 4 bytes), in either byte order.
    fn block(be: bool, kind: u32, body: &[u8]) -> Vec<u8> {
        let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut body = body.to_vec();
        body.resize(body.len().div_ceil(4) * 4, 0);
        let len = 12 + body.len() as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&if kind == MAGIC_PCAPNG {
            kind.to_le_bytes()
        } else {
            w(kind)
        });
        b.extend_from_slice(&w(len));
        b.extend_from_slice(&body);
        b.extend_from_slice(&w(len));
        b
    }

    /// Words and halves in either byte order, for block bodies.
    fn words(be: bool, v: &[u32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| if be { x.to_be_bytes() } else { x.to_le_bytes() })
            .collect()
    }

    fn halves(be: bool, v: &[u16]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| if be { x.to_be_bytes() } else { x.to_le_bytes() })
            .collect()
    }

    fn shb(be: bool) -> Vec<u8> {
        let mut body = words(be, &[PCAPNG_BOM]);
        body.extend(halves(be, &[1, 0]));
        body.extend_from_slice(&[0xff; 8]);
        block(be, MAGIC_PCAPNG, &body)
    }

    /// An interface block: Ethernet (or `linktype`), snaplen, and options as (code, value).
    fn idb(be: bool, linktype: u16, snaplen: u32, opts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = halves(be, &[linktype, 0]);
        body.extend(words(be, &[snaplen]));
        for (code, v) in opts {
            body.extend(halves(be, &[*code, v.len() as u16]));
            body.extend_from_slice(v);
            body.resize(body.len().div_ceil(4) * 4, 0);
        }
        if !opts.is_empty() {
            body.extend_from_slice(&[0; 4]);
        }
        block(be, BLOCK_IDB, &body)
    }

    fn epb(be: bool, ifc: u32, ts: u64, frame: &[u8], orig: u32) -> Vec<u8> {
        let mut body = words(be, &[ifc, (ts >> 32) as u32, ts as u32, frame.len() as u32, orig]);
        body.extend_from_slice(frame);
        block(be, BLOCK_EPB, &body)
    }

    fn spb(be: bool, frame: &[u8]) -> Vec<u8> {
        let mut body = words(be, &[frame.len() as u32]);
        body.extend_from_slice(frame);
        block(be, BLOCK_SPB, &body)
    }

    #[test]
    fn pcapng_round_trip_in_memory_and_by_the_files_name() {
        let recs = sample();
        let mut w = Writer::new_as(Vec::new(), Format::Pcapng).unwrap();
        for (ts, f) in &recs {
            w.write(*ts, f).unwrap();
        }
        let bytes = w.into_inner().unwrap();
        assert_eq!(&bytes[..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
        let r = Reader::from_bytes("mem.pcapng", bytes).unwrap();
        let got: Vec<(u64, Vec<u8>)> = r.iter().map(|(t, f)| (t, f.to_vec())).collect();
        assert_eq!(got, recs);
        assert_eq!(Format::of_path(Path::new("a/x.PcapNG")), Format::Pcapng);
        assert_eq!(Format::of_path(Path::new("x.pcap")), Format::Pcap);
        let tmp = TempFile(std::env::temp_dir().join(format!("rawpkt-pcap-{}-named.pcapng", std::process::id())));
        let mut w = Writer::create(&tmp.0).unwrap();
        assert_eq!(w.format(), Format::Pcapng);
        w.write(7, &frame(0, 70_000)).unwrap();
        w.flush().unwrap();
        drop(w);
        let r = Reader::open(&tmp.0).unwrap();
        assert_eq!(r.get(0), Some((7, &frame(0, 70_000)[..SNAPLEN as usize])));
    }

    /// Two sections, one big-endian and one little-endian; interfaces of microseconds (the
    /// default), of 2^-3 s with a 10 s offset; Enhanced, Simple and obsolete Packet Blocks, and
    /// blocks no replay needs (a name resolution block, interface statistics) stepped over.
    #[test]
    fn pcapng_fixture_of_both_byte_orders_and_resolutions() {
        let (f0, f1, f2, f3) = (frame(0, 60), frame(1, 61), frame(2, 100), frame(3, 64));
        let mut b = Vec::new();
        b.extend(shb(true));
        b.extend(idb(true, 1, 65535, &[]));
        b.extend(block(true, 4, &[0, 0, 0, 0]));
        b.extend(epb(true, 0, 1_700_000_000_000_001, &f0, 60));
        b.extend(spb(true, &f1));
        b.extend(shb(false));
        b.extend(idb(
            false,
            1,
            80,
            &[
                (2, b"eth0".to_vec()),
                (OPT_IF_TSRESOL, vec![0x83]),
                (OPT_IF_TSOFFSET, 10u64.to_le_bytes().to_vec()),
            ],
        ));
        b.extend(block(false, 5, &[0; 20]));
        b.extend(epb(false, 0, 12, &f2[..80], 100));
        let mut pb = halves(false, &[0, 0]);
        pb.extend(words(false, &[0, 4, 64, 64]));
        pb.extend_from_slice(&f3);
        b.extend(block(false, BLOCK_PB, &pb));
        let r = Reader::from_bytes("fix.pcapng", b.clone()).unwrap();
        let got: Vec<(u64, &[u8])> = r.iter().collect();
        assert_eq!(
            got,
            [
                (1_700_000_000_000_001_000, &f0[..]),
                // A simple packet has no time: the one before it.
                (1_700_000_000_000_001_000, &f1[..]),
                // 12 eighths of a second, 10 s later.
                (11_500_000_000, &f2[..80]),
                (10_500_000_000, &f3[..]),
            ]
        );
        // if_tsoffset in a big-endian section: the high word first.
        let mut be = shb(true);
        be.extend(idb(true, 1, 0, &[(OPT_IF_TSOFFSET, 3u64.to_be_bytes().to_vec())]));
        be.extend(epb(true, 0, 5, &f0, 60));
        assert_eq!(Reader::from_bytes("be", be).unwrap().get(0).unwrap().0, 3_000_005_000);
        // Every cut is a shorter valid file (at a block's end) or one error line.
        let mut ends = Vec::new();
        let mut at = 0;
        while at < b.len() {
            at += u32::from_be_bytes(b[at + 4..at + 8].try_into().unwrap())
                .min(u32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap())) as usize;
            ends.push(at);
        }
        for cut in 0..b.len() {
            match Reader::from_bytes("cut.pcapng", b[..cut].to_vec()) {
                Ok(_) => assert!(ends.contains(&cut), "cut at {cut} read as valid"),
                Err(PcapError::TooShort { .. }) => assert!(cut < FILE_HEADER),
                Err(e) => {
                    assert!(!ends.contains(&cut), "cut at {cut}: {e}");
                    let e = e.to_string();
                    assert!(e.starts_with("cut.pcapng: ") && !e.contains('\n'), "{e}");
                }
            }
        }
    }

    #[test]
    fn pcapng_mistakes_are_one_line_each() {
        let f = frame(0, 60);
        let with = |blocks: &[Vec<u8>]| {
            let mut b = shb(false);
            blocks.iter().for_each(|x| b.extend_from_slice(x));
            Reader::from_bytes("m.pcapng", b)
                .map(|r| r.len())
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            with(&[epb(false, 0, 0, &f, 60)]),
            Err("m.pcapng: pcapng block at byte 28: a packet of interface 0, which no interface block before it describes".into())
        );
        assert_eq!(
            with(&[idb(false, 113, 0, &[]), epb(false, 0, 0, &f, 60)]),
            Err("m.pcapng: linktype 113 (Linux cooked capture) is not supported; only 1 (Ethernet) is".into())
        );
        let mut odd = epb(false, 0, 0, &f, 60);
        let n = odd.len();
        odd[n - 4] ^= 4;
        assert_eq!(
            with(&[idb(false, 1, 0, &[]), odd]),
            Err("m.pcapng: pcapng block at byte 48: block length 92 at its start, 88 at its end".into())
        );
        let mut big = epb(false, 0, 0, &f, 60);
        big[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = with(&[idb(false, 1, 0, &[]), big]).unwrap_err();
        assert!(
            e.contains("record 1 at byte 48 is truncated (needs 4294967295 bytes, 60 left)"),
            "{e}"
        );
        assert_eq!(
            with(&[idb(false, 1, 0, &[(OPT_IF_TSRESOL, vec![20])])]),
            Err("m.pcapng: pcapng block at byte 28: if_tsresol 0x14 is finer than a u64 can count".into())
        );
        assert_eq!(with(&[idb(false, 1, 0, &[])]), Ok(0), "no packet is an empty capture");
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
        for format in [Format::Pcap, Format::Pcapng] {
            let tmp = TempFile::new(&format!("tshark-{format:?}"));
            let mut w = Writer::create_as(&tmp.0, format).unwrap();
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
                "tshark failed on {format:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8(out.stdout).unwrap();
            let lines: Vec<&str> = stdout.lines().collect();
            assert_eq!(lines.len(), 100, "{format:?}: {stdout}");
            for (i, line) in lines.iter().enumerate() {
                let want = format!("{}\t1700000000.{:03}000007", lens[i], i);
                assert_eq!(*line, want, "{format:?}: frame {}", i + 1);
            }
            // And it says which format it read.
            let info = Command::new("capinfos").arg("-t").arg(&tmp.0).output();
            if let Some(o) = info.ok().filter(|o| o.status.success()) {
                let text = String::from_utf8_lossy(&o.stdout);
                let want = if format == Format::Pcapng {
                    "pcapng"
                } else {
                    "nanosecond pcap"
                };
                assert!(text.contains(want), "{format:?}: {text}");
            }
        }
        // A pcapng file tshark wrote (editcap converts ours) reads as tshark reads it.
        let ours = TempFile::new("tshark-ours");
        let mut w = Writer::create_as(&ours.0, Format::Pcap).unwrap();
        for i in 0..10 {
            w.write(
                1_700_000_000_000_000_000 + i * 333_333,
                &frame(i as usize, 60 + i as usize),
            )
            .unwrap();
        }
        w.flush().unwrap();
        drop(w);
        let theirs = TempFile::new("tshark-theirs");
        let ok = Command::new("editcap")
            .args(["-F", "pcapng"])
            .arg(&ours.0)
            .arg(&theirs.0)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "editcap -F pcapng failed");
        let a = Reader::open(&ours.0).unwrap();
        let b = Reader::open(&theirs.0).unwrap();
        assert_eq!(a.iter().collect::<Vec<_>>(), b.iter().collect::<Vec<_>>());
    }
}
