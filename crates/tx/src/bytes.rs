//! Byte copies on the transaction fast path.

/// Copies `src` into `dst`, which must have the same length. The sizes transactions move
/// most (words, pointers, small fields and values) compile to a few loads and stores instead
/// of a call to `memcpy`, whose entry costs more than the copy itself at these sizes.
#[inline(always)]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of different lengths"
    );
    match src.len() {
        8 => dst[..8].copy_from_slice(&src[..8]),
        16 => dst[..16].copy_from_slice(&src[..16]),
        32 => dst[..32].copy_from_slice(&src[..32]),
        64 => dst[..64].copy_from_slice(&src[..64]),
        _ => dst.copy_from_slice(src),
    }
}

/// Appends `src` to `dst`, with [`copy_bytes`]'s fast sizes.
#[inline(always)]
pub fn extend_bytes(dst: &mut Vec<u8>, src: &[u8]) {
    match src.len() {
        8 => dst.extend_from_slice(&src[..8]),
        16 => dst.extend_from_slice(&src[..16]),
        _ => dst.extend_from_slice(src),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length() {
        for len in 0..80 {
            let src: Vec<u8> = (0..len as u8).map(|b| b ^ 0x5A).collect();
            let mut dst = vec![0u8; len];
            copy_bytes(&mut dst, &src);
            assert_eq!(dst, src);
            let mut grown = vec![7u8];
            extend_bytes(&mut grown, &src);
            assert_eq!((grown[0], &grown[1..]), (7, &src[..]));
        }
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn refuses_different_lengths() {
        copy_bytes(&mut [0u8; 9], &[1u8; 8]);
    }
}
