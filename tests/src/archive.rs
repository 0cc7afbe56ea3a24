//! Minimal .tar (ustar) and .zip (stored) writers, so tests can build
//! archives without extra dependencies.

/// A ustar archive of (name, bytes).
pub fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in members {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let octal = |h: &mut [u8], at: usize, width: usize, v: u64| {
            let s = format!("{v:0w$o}\0", w = width - 1);
            h[at..at + width].copy_from_slice(s.as_bytes());
        };
        octal(&mut h, 100, 8, 0o644);
        octal(&mut h, 108, 8, 0);
        octal(&mut h, 116, 8, 0);
        octal(&mut h, 124, 12, data.len() as u64);
        octal(&mut h, 136, 12, 0);
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].fill(b' ');
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        let s = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(s.as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// A zip archive of stored (uncompressed) members.
pub fn zip(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    let u16le = |v: &mut Vec<u8>, x: u16| v.extend_from_slice(&x.to_le_bytes());
    let u32le = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
    for (name, data) in members {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let (crc, len, offset) = (crc.sum(), data.len() as u32, out.len() as u32);
        u32le(&mut out, 0x0403_4b50);
        for x in [20, 0, 0, 0, 0] {
            u16le(&mut out, x); // version, flags, method (stored), time, date
        }
        for x in [crc, len, len] {
            u32le(&mut out, x);
        }
        u16le(&mut out, name.len() as u16);
        u16le(&mut out, 0);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);

        u32le(&mut central, 0x0201_4b50);
        for x in [20, 20, 0, 0, 0, 0] {
            u16le(&mut central, x); // made by, needed, flags, method, time, date
        }
        for x in [crc, len, len] {
            u32le(&mut central, x);
        }
        for x in [name.len() as u16, 0, 0, 0, 0] {
            u16le(&mut central, x); // name, extra, comment, disk, internal attrs
        }
        u32le(&mut central, 0); // external attrs
        u32le(&mut central, offset);
        central.extend_from_slice(name.as_bytes());
    }
    let (cd_offset, cd_len) = (out.len() as u32, central.len() as u32);
    out.extend_from_slice(&central);
    u32le(&mut out, 0x0605_4b50);
    for x in [0, 0, members.len() as u16, members.len() as u16] {
        u16le(&mut out, x);
    }
    u32le(&mut out, cd_len);
    u32le(&mut out, cd_offset);
    u16le(&mut out, 0);
    out
}
