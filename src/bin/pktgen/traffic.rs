//! What pktgen sends: Ethernet/IPv4-or-IPv6/UDP templates, one per frame size, and the per-packet
//! stamp (flow port, sequence number, send time) written into each buffer.
//!
//! Frames are templates, as in TRex and rdma-pktgen: a transmit core's pool buffers keep their
//! bytes from one use to the next, so a buffer gets a whole template only when it last held
//! another one (or nothing); after that a packet costs the fields that vary: the sequence number
//! and send time, and the UDP source port when there are several flows. None of them is covered
//! by a checksum pktgen computes: the IPv4 header checksum covers neither, the IPv4 UDP checksum
//! is 0 ("none"), and the IPv6 UDP checksum is offloaded to the NIC.

use std::net::IpAddr;

use rawpkt::flow::wire::{csum_add, csum_fold};

use crate::cli::{Size, IMIX};
use crate::fail::Fail;
use crate::stream::StreamSpec;

/// Stamp after the UDP header: magic (2 bytes), stream id (the top byte of the next 8) and
/// sequence number (their low 56 bits), send time in ns (8). The stream id takes a byte of the
/// number rather than a byte of its own: a 60-byte IPv4 frame has exactly 18 bytes after UDP.
pub const STAMP_LEN: usize = 18;
pub const MAGIC: [u8; 2] = [0x52, 0x54];

const ETH: usize = 14;
const UDP: usize = 8;

fn ip_len(ip: IpAddr) -> usize {
    if ip.is_ipv4() {
        20
    } else {
        40
    }
}

/// Smallest frame that holds the headers and the stamp.
pub fn min_frame(ip: IpAddr) -> usize {
    ETH + ip_len(ip) + UDP + STAMP_LEN
}

/// Where the stamp sits in a frame of the given IP version.
pub fn stamp_offset(ipv6: bool) -> usize {
    ETH + if ipv6 { 40 } else { 20 } + UDP
}

/// Frames a replay holds at most: the schedule numbers them with a `u16`.
pub const MAX_REPLAY_FRAMES: usize = u16::MAX as usize;
/// Longest frame replayed (without FCS), as `--size` allows.
pub const MAX_REPLAY_FRAME: usize = 1514;
/// Largest pcap file `--pcap` reads: its header and [`MAX_REPLAY_FRAMES`] records of
/// [`MAX_REPLAY_FRAME`] bytes (about 96 MiB). A longer file cannot be replayed whole, so it is
/// refused before it is read instead of filling memory (`--pcap /dev/zero` once did).
pub const MAX_REPLAY_FILE: u64 =
    (rawpkt::pcap::FILE_HEADER + MAX_REPLAY_FRAMES * (rawpkt::pcap::RECORD_HEADER + MAX_REPLAY_FRAME)) as u64;

/// The frames of a pcap file to replay, read whole and checked.
pub fn replay_file(path: &std::path::Path) -> Result<Traffic, Fail> {
    use rawpkt::pcap::{PcapError, Reader};
    let r = Reader::open_at_most(path, MAX_REPLAY_FILE).map_err(|e| match e {
        PcapError::TooLarge { len, .. } => Fail::Runtime(format!(
            "--pcap {}: {len} bytes is more than pktgen replays: at most {MAX_REPLAY_FRAMES} frames of up to \
             {MAX_REPLAY_FRAME} bytes, a pcap file of {MAX_REPLAY_FILE} bytes",
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

pub struct Traffic {
    /// Generated frames, one per size; or the frames of a pcap file.
    frames: Vec<Vec<u8>>,
    /// Which frame each packet of a repeating cycle uses (IMIX order, or pcap order).
    schedule: Vec<u16>,
    stamped: bool,
    stamp_off: usize,
    udp_src_off: usize,
    src_port: u16,
    flows: u32,
    /// The stream id, in the stamp's top byte of the sequence number.
    tag: u64,
    /// A replay: each frame's time in the file, ns from the first.
    pub times: Vec<u64>,
    /// Ask the NIC for the UDP checksum (IPv6 requires one; IPv4 sends 0, "none").
    pub tx_flags: u32,
}

/// One Ethernet/IP/UDP frame of `len` bytes to `dst_mac`; payload zero apart from the stamp space.
fn build(cfg: &StreamSpec, src_mac: [u8; 6], dst_mac: [u8; 6], len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    let l3 = ETH;
    let l4 = l3 + ip_len(cfg.src_ip);
    let udp_len = (len - l4) as u16;
    match (cfg.src_ip, cfg.dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let h = &mut f[l3..l4];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((len - l3) as u16).to_be_bytes());
            h[6] = 0x40; // DF
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = csum_fold(csum_add(0, h));
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let h = &mut f[l3..l4];
            h[0] = 0x60;
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = 17;
            h[7] = 64;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
        }
        _ => unreachable!("Config checks that both addresses are of one family"),
    }
    f[l4..l4 + 2].copy_from_slice(&cfg.src_port.to_be_bytes());
    f[l4 + 2..l4 + 4].copy_from_slice(&cfg.dst_port.to_be_bytes());
    f[l4 + 4..l4 + 6].copy_from_slice(&udp_len.to_be_bytes());
    let stamp = l4 + UDP;
    f[stamp..stamp + 2].copy_from_slice(&MAGIC);
    f
}

impl Traffic {
    /// Stream number `id` of a run.
    pub fn generated(cfg: &StreamSpec, id: u8, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Traffic {
        let sizes: Vec<usize> = match cfg.size {
            Size::Fixed(n) => vec![n],
            Size::Imix => IMIX.iter().map(|&(n, _)| n.max(min_frame(cfg.src_ip))).collect(),
        };
        let schedule: Vec<u16> = match cfg.size {
            Size::Fixed(_) => vec![0],
            // Interleaved 7:4:1 rather than in runs, as traffic mixes arrive.
            Size::Imix => vec![0, 1, 0, 0, 1, 0, 2, 0, 1, 0, 0, 1],
        };
        let frames: Vec<Vec<u8>> = sizes.iter().map(|&n| build(cfg, src_mac, dst_mac, n)).collect();
        let ipv6 = cfg.src_ip.is_ipv6();
        let stamp_off = stamp_offset(ipv6);
        Traffic {
            frames,
            schedule,
            stamped: true,
            stamp_off,
            udp_src_off: ETH + ip_len(cfg.src_ip),
            src_port: cfg.src_port,
            flows: cfg.flows,
            tag: u64::from(id) << 56,
            times: Vec::new(),
            tx_flags: if ipv6 { rawpkt::flags::TX_L4_CSUM } else { 0 },
        }
    }

    /// Frames replayed in file order, unmodified (no stamp, so no latency).
    pub fn replay(frames: Vec<Vec<u8>>) -> Result<Traffic, String> {
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
            src_port: 0,
            flows: 1,
            tag: 0,
            times: Vec::new(),
            tx_flags: 0,
        })
    }

    /// Length of the packet at `cursor`.
    #[inline]
    pub fn len_at(&self, cursor: &Cursor) -> usize {
        self.frames[usize::from(self.schedule[cursor.slot])].len()
    }

    /// Writes the packet at `cursor`, numbered `seq`, into `buf` (already `len_at` bytes long),
    /// and moves the cursor on: the next size of the schedule and the next flow. `held` is what
    /// the buffer holds from its last use (see [`Held`]): the whole template is copied only
    /// when that is not this packet's template, else just the fields that vary.
    #[inline]
    pub fn write(&self, cursor: &mut Cursor, held: &mut u16, seq: u64, now_ns: u64, buf: &mut [u8]) {
        let t = self.schedule[cursor.slot];
        // Tags are template + 1, so a fresh buffer's 0 matches no template.
        if *held != t + 1 {
            buf.copy_from_slice(&self.frames[usize::from(t)]);
            *held = t + 1;
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

    /// The one length every packet has, if they all have one (a fixed `--size`).
    pub fn fixed_len(&self) -> Option<usize> {
        let first = self.frames.first()?.len();
        self.frames.iter().all(|f| f.len() == first).then_some(first)
    }

    /// Whether the frames carry pktgen's stamps (a replay's frames are sent as they are).
    pub fn stamped(&self) -> bool {
        self.stamped
    }

    pub fn largest(&self) -> usize {
        self.frames.iter().map(Vec::len).max().unwrap_or(0)
    }
}

/// What each buffer of a transmit core's pool holds from its last use, by buffer index: the
/// template + 1, or 0 for "unknown". Only the core that owns the pool writes its buffers (the
/// NIC reads them), so a buffer keeps what was last written into it.
pub struct Held {
    tags: Vec<u16>,
}

impl Held {
    pub fn new(buffers: u32) -> Held {
        Held {
            tags: vec![0; buffers as usize],
        }
    }

    #[inline]
    pub fn of(&mut self, buffer: u32) -> &mut u16 {
        &mut self.tags[buffer as usize]
    }
}

/// Where a transmit core is in the size schedule and the flow cycle.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor {
    slot: usize,
    flow: u32,
}

/// The stamp of a received frame, if it carries one: (stream id, sequence number, send time in
/// ns).
pub fn read_stamp(frame: &[u8]) -> Option<(u8, u64, u64)> {
    let ipv6 = match frame.get(12..14)? {
        [0x08, 0x00] => false,
        [0x86, 0xdd] => true,
        _ => return None,
    };
    let off = stamp_offset(ipv6);
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
                assert_eq!(udp.destination_port(), 5678);
                assert_eq!(udp.source_port(), 1234 + (seq % u64::from(c.flows)) as u16);
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
