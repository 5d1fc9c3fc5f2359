//! What pktgen sends: Ethernet/IPv4-or-IPv6/UDP templates, one per frame size, and the per-packet
//! stamp (flow port, sequence number, send time) written into each buffer.
//!
//! Frames are templates, as in TRex and rdma-pktgen: a transmit core's pool buffers keep their
//! bytes from one use to the next, so a buffer gets a whole template only when it last held
//! another one (or nothing); after that a packet costs the fields that vary: the sequence number
//! and send time, and the UDP source port when there are several flows. None of them is covered
//! by a checksum pktgen computes: the IPv4 header checksum covers neither, the IPv4 UDP checksum
//! is 0 ("none"), and the IPv6 UDP checksum is offloaded to the NIC.

use crate::cli::{Size, IMIX};
use crate::fail::Fail;
use crate::stream::StreamSpec;
use crate::template::{Field, Layout, Range, MAX_RANGES};

/// Stamp after the UDP header: magic (2 bytes), stream id (the top byte of the next 8) and
/// sequence number (their low 56 bits), send time in ns (8). The stream id takes a byte of the
/// number rather than a byte of its own: a 60-byte IPv4 frame has exactly 18 bytes after UDP.
pub(crate) const STAMP_LEN: usize = 18;
pub(crate) const MAGIC: [u8; 2] = [0x52, 0x54];

const ETH: usize = 14;
const UDP: usize = 8;

/// Smallest frame of a stream's template that holds its headers and the stamp.
pub(crate) fn min_len(s: &StreamSpec) -> usize {
    crate::template::header_len(&s.headers, s.src_ip) + STAMP_LEN
}

/// Where the stamp sits in a frame of the given IP version.
pub(crate) fn stamp_offset(ipv6: bool) -> usize {
    ETH + if ipv6 { 40 } else { 20 } + UDP
}

/// Frames a replay holds at most: the schedule numbers them with a `u16`.
pub(crate) const MAX_REPLAY_FRAMES: usize = u16::MAX as usize;
/// Longest frame replayed (without FCS), as `--size` allows.
pub(crate) const MAX_REPLAY_FRAME: usize = 1514;
/// Largest capture file `--pcap` reads: 64 KiB of headers and other blocks (a pcapng file's
/// section and interface blocks, name resolution, statistics) and [`MAX_REPLAY_FRAMES`] records
/// of [`MAX_REPLAY_FRAME`] bytes in pcapng's largest framing (about 97 MiB). A longer file
/// cannot be replayed whole, so it is refused before it is read instead of filling memory.
pub(crate) const MAX_REPLAY_FILE: u64 =
    (65536 + MAX_REPLAY_FRAMES * (rawpkt_tools::pcap::MAX_RECORD_OVERHEAD + MAX_REPLAY_FRAME)) as u64;

/// The frames of a pcap file to replay, read whole and checked.
pub(crate) fn replay_file(path: &std::path::Path) -> Result<Traffic, Fail> {
    use rawpkt_tools::pcap::{PcapError, Reader};
    // A path that names no regular file, or a file longer than a replay takes, is the command's
    // mistake (as for --streams); one that cannot be read or parsed is the file's.
    let r = Reader::open_at_most(path, MAX_REPLAY_FILE).map_err(|e| match e {
        PcapError::NotRegular { .. } => Fail::Usage(format!("--pcap {e}")),
        PcapError::TooLarge { len, .. } => Fail::Usage(format!(
            "--pcap {}: {len} bytes is more than pktgen replays: at most {MAX_REPLAY_FRAMES} frames of up to \
             {MAX_REPLAY_FRAME} bytes, a capture file of {MAX_REPLAY_FILE} bytes",
            path.display()
        )),
        e => Fail::Runtime(format!("--pcap {e}")),
    })?;
    let t0 = r.get(0).map_or(0, |(t, _)| t);
    // A capture's clock may step back (pcap has no rule against it); a frame dated before the
    // one ahead of it leaves right after it.
    let mut last = 0;
    let times = r
        .iter()
        .map(|(t, _)| {
            last = t.saturating_sub(t0).max(last);
            last
        })
        .collect();
    let mut t = Traffic::replay(r.frames()).map_err(Fail::Runtime)?;
    t.times = times;
    Ok(t)
}

pub(crate) struct Traffic {
    /// Generated frames, one per size; or the frames of a pcap file.
    frames: Vec<Vec<u8>>,
    /// Which frame each packet of a repeating cycle uses (IMIX order, or pcap order).
    schedule: Vec<u16>,
    stamped: bool,
    stamp_off: usize,
    udp_src_off: usize,
    src_port: u16,
    flows: u32,
    /// Fields that vary per packet, each with its template value (the low 32 bits of an
    /// address or MAC, or a port), and the template's offsets.
    ranges: Vec<(Range, u32)>,
    layout: Layout,
    /// Whether there are varying fields or software checksums (see [`Traffic::write`]).
    extras: bool,
    /// The stream id, in the stamp's top byte of the sequence number.
    tag: u64,
    /// The templates of the streams before this one, so that a buffer's tag names a template
    /// of the whole run: a buffer one stream used and another reuses gets the new template.
    pub tag_base: u32,
    /// A replay: each frame's time in the file, ns from the first.
    pub times: Vec<u64>,
    /// Ask the NIC for the UDP checksum (IPv6 requires one; IPv4 sends 0, "none").
    pub tx_flags: u32,
}

impl Traffic {
    /// Stream number `id` of a run.
    pub(crate) fn generated(cfg: &StreamSpec, id: u8, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Traffic {
        let sizes: Vec<usize> = match cfg.size {
            Size::Fixed(n) => vec![n],
            Size::Imix => IMIX.iter().map(|&(n, _)| n.max(min_len(cfg))).collect(),
        };
        let schedule: Vec<u16> = match cfg.size {
            Size::Fixed(_) => vec![0],
            // Interleaved 7:4:1 rather than in runs, as traffic mixes arrive.
            Size::Imix => vec![0, 1, 0, 0, 1, 0, 2, 0, 1, 0, 0, 1],
        };
        let build = |n| {
            crate::template::build(
                &cfg.headers,
                (src_mac, dst_mac),
                (cfg.src_ip, cfg.dst_ip),
                (cfg.src_port, cfg.dst_port),
                n,
            )
        };
        let layout = build(sizes[0]).1;
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .map(|&n| {
                let mut f = build(n).0;
                // The magic is in the template; the rest of the stamp varies.
                f[layout.l4 + UDP..][..2].copy_from_slice(&MAGIC);
                f
            })
            .collect();
        let f = &frames[0];
        let ranges = cfg
            .ranges
            .iter()
            .map(|&r| {
                let at = range_offset(&layout, r.field);
                let base = match r.field {
                    Field::SrcPort | Field::DstPort => u32::from(u16::from_be_bytes([f[at], f[at + 1]])),
                    _ => u32::from_be_bytes(f[at..at + 4].try_into().expect("4 bytes")),
                };
                (r, base)
            })
            .collect();
        Traffic {
            frames,
            schedule,
            stamped: true,
            stamp_off: layout.l4 + UDP,
            udp_src_off: layout.l4,
            ranges,
            tx_flags: if layout.offload { rawpkt::flags::TX_L4_CSUM } else { 0 },
            extras: !cfg.ranges.is_empty() || !layout.sw_csums.is_empty(),
            layout,
            src_port: cfg.src_port,
            flows: cfg.flows,
            tag: u64::from(id) << 56,
            tag_base: 0,
            times: Vec::new(),
        }
    }

    /// Frames replayed in file order, unmodified (no stamp, so no latency).
    pub(crate) fn replay(frames: Vec<Vec<u8>>) -> Result<Traffic, String> {
        if frames.is_empty() {
            return Err("the pcap file holds no frames".into());
        }
        if frames.len() > MAX_REPLAY_FRAMES {
            return Err(format!(
                "the pcap file holds {} frames; pktgen replays at most {MAX_REPLAY_FRAMES}",
                frames.len()
            ));
        }
        if let Some((i, f)) = frames
            .iter()
            .enumerate()
            .find(|(_, f)| !(14..=MAX_REPLAY_FRAME).contains(&f.len()))
        {
            return Err(format!(
                "pcap frame {} is {} bytes; frames must be 14 to {MAX_REPLAY_FRAME} bytes",
                i + 1,
                f.len()
            ));
        }
        Ok(Traffic {
            schedule: (0..frames.len() as u16).collect(),
            frames,
            stamped: false,
            stamp_off: 0,
            udp_src_off: 0,
            ranges: Vec::new(),
            layout: Layout::default(),
            extras: false,
            src_port: 0,
            flows: 1,
            tag: 0,
            tag_base: 0,
            times: Vec::new(),
            tx_flags: 0,
        })
    }

    /// Length of the packet at `cursor`.
    #[inline]
    pub(crate) fn len_at(&self, cursor: &Cursor) -> usize {
        self.frames[usize::from(self.schedule[cursor.slot])].len()
    }

    /// Writes the packet at `cursor`, numbered `seq`, into `buf` (already `len_at` bytes long),
    /// and moves the cursor on: the next size of the schedule and the next flow. `held` is what
    /// the buffer holds from its last use (see [`Held`]): the whole template is copied only
    /// when that is not this packet's template, else just the fields that vary.
    #[inline]
    pub(crate) fn write(&self, cursor: &mut Cursor, held: &mut u32, seq: u64, now_ns: u64, buf: &mut [u8]) {
        let t = self.schedule[cursor.slot];
        // Tags are template + 1, so a fresh buffer's 0 matches no template.
        let tag = self.tag_base + u32::from(t) + 1;
        if *held != tag {
            buf.copy_from_slice(&self.frames[usize::from(t)]);
            *held = tag;
        }
        let flow = cursor.flow;
        // Counters that wrap instead of `%`: a 64-bit division per packet costs more than the
        // rest of building it.
        cursor.slot += 1;
        if cursor.slot == self.schedule.len() {
            cursor.slot = 0;
        }
        cursor.flow += 1;
        if cursor.flow == self.flows {
            cursor.flow = 0;
        }
        // Varying fields and software checksums are out of line, behind one flag: a plain
        // template (the common case, and docs/benchmarks.md's figures) pays one branch for them,
        // and the per-packet loop stays small enough to keep its values in registers.
        if self.extras {
            self.write_extras(cursor, flow, seq, now_ns, buf);
        } else {
            self.stamp(flow, seq, now_ns, buf);
        }
    }

    /// The flow's source port and the stamp, if the frames carry them.
    #[inline(always)]
    fn stamp(&self, flow: u32, seq: u64, now_ns: u64, buf: &mut [u8]) {
        if self.stamped {
            if self.flows > 1 {
                let port = self.src_port.wrapping_add(flow as u16);
                buf[self.udp_src_off..self.udp_src_off + 2].copy_from_slice(&port.to_be_bytes());
            }
            // The magic is in the template; the number and the time vary.
            let s = &mut buf[self.stamp_off + 2..self.stamp_off + STAMP_LEN];
            s[0..8].copy_from_slice(&(seq | self.tag).to_be_bytes());
            s[8..16].copy_from_slice(&now_ns.to_be_bytes());
        }
    }

    /// [`Traffic::write`]'s end for templates with varying fields or checksums pktgen
    /// computes (IPv6 inside a tunnel), which cover the stamp and so come after it.
    #[inline(never)]
    fn write_extras(&self, cursor: &mut Cursor, flow: u32, seq: u64, now_ns: u64, buf: &mut [u8]) {
        if !self.ranges.is_empty() {
            self.vary(cursor, buf);
        }
        self.stamp(flow, seq, now_ns, buf);
        if self.stamped {
            for &(l3, l4, _) in &self.layout.sw_csums {
                crate::template::udp6_csum(buf, l3, l4);
            }
        }
    }

    /// Sets the next value of every varying field, keeping the IPv4 header checksum right.
    fn vary(&self, cursor: &mut Cursor, buf: &mut [u8]) {
        let lay = &self.layout;
        for (i, &(r, base)) in self.ranges.iter().enumerate() {
            let idx = if r.random {
                if cursor.rng == 0 {
                    cursor.rng = 0x9e37_79b9_7f4a_7c15;
                }
                cursor.rng ^= cursor.rng >> 12;
                cursor.rng ^= cursor.rng << 25;
                cursor.rng ^= cursor.rng >> 27;
                let x = cursor.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
                // Multiply and shift rather than `%`: no division per packet (Lemire 2019).
                ((x * u64::from(r.count)) >> 32) as u32
            } else {
                let v = cursor.ctr[i];
                cursor.ctr[i] = if v + 1 == r.count { 0 } else { v + 1 };
                v
            };
            let at = range_offset(lay, r.field);
            match r.field {
                Field::SrcPort | Field::DstPort => {
                    buf[at..at + 2].copy_from_slice(&(base.wrapping_add(idx) as u16).to_be_bytes());
                }
                Field::SrcIp | Field::DstIp if !lay.v6 => {
                    let new = base.wrapping_add(idx).to_be_bytes();
                    let mut old = [0u8; 4];
                    old.copy_from_slice(&buf[at..at + 4]);
                    buf[at..at + 4].copy_from_slice(&new);
                    let c = lay.l3 + 10;
                    crate::template::csum_replace(&mut buf[c..c + 2], &old, &new);
                }
                // IPv6 has no header checksum; the UDP one is the NIC's or computed after.
                _ => buf[at..at + 4].copy_from_slice(&base.wrapping_add(idx).to_be_bytes()),
            }
        }
    }

    /// The one length every packet has, if they all have one (a fixed `--size`).
    pub(crate) fn fixed_len(&self) -> Option<usize> {
        let first = self.frames.first()?.len();
        self.frames.iter().all(|f| f.len() == first).then_some(first)
    }

    /// The mean length of its frames (without FCS), over a cycle of the schedule: what a bit
    /// rate is divided by.
    pub(crate) fn mean_len(&self) -> f64 {
        let sum: usize = self.schedule.iter().map(|&t| self.frames[usize::from(t)].len()).sum();
        sum as f64 / self.schedule.len().max(1) as f64
    }

    /// How many templates (frames) this traffic has.
    pub(crate) fn templates(&self) -> usize {
        self.frames.len()
    }

    /// Whether the frames carry pktgen's stamps (a replay's frames are sent as they are).
    pub(crate) fn stamped(&self) -> bool {
        self.stamped
    }

    pub(crate) fn largest(&self) -> usize {
        self.frames.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// The traffic as the send loop's fast path writes it, when its packets differ only in
    /// the stamp and the flow's source port: one generated template, no varying field, no
    /// checksum computed here.
    pub(crate) fn plain(&self) -> Option<crate::template::Plain> {
        (self.stamped && self.frames.len() == 1 && !self.extras).then(|| crate::template::Plain {
            frame: self.frames[0].clone().into_boxed_slice(),
            held: self.tag_base + 1,
            seq_off: self.stamp_off + 2,
            id: self.tag,
            flows: self.flows,
            src_port: self.src_port,
            port_off: self.udp_src_off,
            tx_flags: self.tx_flags,
        })
    }
}

/// What each buffer of a transmit core's pool holds from its last use, by buffer index: the
/// template's number over all streams + 1 (`Traffic::tag_base`), or 0 for "unknown". Only the core that owns the pool writes its buffers (the
/// NIC reads them), so a buffer keeps what was last written into it.
pub(crate) struct Held {
    tags: Vec<u32>,
}

impl Held {
    pub(crate) fn new(buffers: u32) -> Held {
        Held {
            tags: vec![0; buffers as usize],
        }
    }

    #[inline]
    pub(crate) fn of(&mut self, buffer: u32) -> &mut u32 {
        &mut self.tags[buffer as usize]
    }

    /// Every buffer's tag, by index: a slice a send loop keeps in registers.
    #[inline]
    pub(crate) fn all(&mut self) -> &mut [u32] {
        &mut self.tags
    }
}

/// Where a transmit core is in the size schedule, the flow cycle and the varying fields.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cursor {
    slot: usize,
    flow: u32,
    ctr: [u32; MAX_RANGES],
    rng: u64,
}

/// Where a varying field's bytes are: the low 4 bytes of an address or MAC, or a port.
fn range_offset(lay: &Layout, f: Field) -> usize {
    match (f, lay.v6) {
        (Field::SrcIp, false) => lay.l3 + 12,
        (Field::DstIp, false) => lay.l3 + 16,
        (Field::SrcIp, true) => lay.l3 + 8 + 12,
        (Field::DstIp, true) => lay.l3 + 24 + 12,
        (Field::SrcPort, _) => lay.l4,
        (Field::DstPort, _) => lay.l4 + 2,
        (Field::SrcMac, _) => 6 + 2,
        (Field::DstMac, _) => 2,
    }
}

/// The stamp of a received frame, if it carries one: (stream id, sequence number, send time in
/// ns).
pub(crate) fn read_stamp(frame: &[u8]) -> Option<(u8, u64, u64)> {
    // Plain IPv4 first, where the magic is found at once: every run without a template. Else
    // (the outer header of a tunnel, VLAN tags, IPv6) the headers are walked.
    let plain = stamp_offset(false);
    let off = if frame.get(12..14)? == [0x08, 0x00] && frame.get(plain..plain + 2)? == MAGIC {
        plain
    } else {
        crate::template::stamp_offset_of(frame)?
    };
    let s = frame.get(off..off + STAMP_LEN)?;
    if s[0..2] != MAGIC {
        return None;
    }
    let seq = u64::from_be_bytes(s[2..10].try_into().ok()?);
    Some((
        (seq >> 56) as u8,
        seq & ((1 << 56) - 1),
        u64::from_be_bytes(s[10..18].try_into().ok()?),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cfg(args: &[&str]) -> StreamSpec {
        let a = crate::cli::Args::try_parse_from(std::iter::once("pktgen").chain(args.iter().copied())).unwrap();
        StreamSpec::from_config(&crate::cli::Config::from_args(a).unwrap())
    }

    const MACS: ([u8; 6], [u8; 6]) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);

    #[test]
    fn generated_frames_are_valid_and_stamped() {
        for args in [
            &["--flows", "4"][..],
            &["--src-ip", "fd00::1", "--dst-ip", "fd00::2", "--size", "128"],
        ] {
            let c = cfg(args);
            let t = Traffic::generated(&c, 5, MACS.0, MACS.1);
            let mut cur = Cursor::default();
            // One buffer reused for every packet, as a pool's buffers are: after the first
            // packet only the fields that vary are written.
            let mut buf = vec![0xa5u8; t.len_at(&cur)];
            let mut held = 0;
            for seq in 0..8u64 {
                t.write(&mut cur, &mut held, seq, 1000 + seq, &mut buf);
                let p = etherparse::SlicedPacket::from_ethernet(&buf).expect("parses");
                let Some(etherparse::TransportSlice::Udp(udp)) = p.transport else {
                    panic!("no UDP")
                };
                assert_eq!(udp.destination_port(), crate::cli::DEFAULT_DST_PORT);
                assert_eq!(
                    udp.source_port(),
                    crate::cli::DEFAULT_SRC_PORT + (seq % u64::from(c.flows)) as u16
                );
                assert_eq!(read_stamp(&buf), Some((5, seq, 1000 + seq)));
                let end = stamp_offset(c.src_ip.is_ipv6()) + STAMP_LEN;
                assert!(buf[end..].iter().all(|&b| b == 0), "payload of the template, not 0xa5");
                if let Some(etherparse::NetSlice::Ipv4(ip)) = p.net {
                    let h = ip.header();
                    assert_eq!(h.header_checksum(), h.to_header().calc_header_checksum());
                }
            }
        }
    }

    #[test]
    fn imix_cycles_seven_four_one() {
        let t = Traffic::generated(&cfg(&["--size", "imix"]), 0, MACS.0, MACS.1);
        let mut cur = Cursor::default();
        let mut buf = vec![0u8; 1514];
        let mut held = 0;
        let lens: Vec<usize> = (0..12)
            .map(|s| {
                let l = t.len_at(&cur);
                t.write(&mut cur, &mut held, s, 0, &mut buf[..l]);
                // Whatever the buffer held before, it now holds this packet's frame.
                assert_eq!(read_stamp(&buf[..l]), Some((0, s, 0)));
                assert_eq!(
                    u16::from_be_bytes([buf[16], buf[17]]) as usize,
                    l - 14,
                    "IPv4 total length"
                );
                l
            })
            .collect();
        assert_eq!(lens.iter().filter(|&&l| l == 60).count(), 7);
        assert_eq!(lens.iter().filter(|&&l| l == 590).count(), 4);
        assert_eq!(lens.iter().filter(|&&l| l == 1514).count(), 1);
    }
}
