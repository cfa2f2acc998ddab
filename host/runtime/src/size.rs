//! Sizes in bytes as people write them, for every variable, option and file that takes one: a whole
//! number with an optional binary unit — `4096`, `8B`, `64K`, `64KB`, `64KiB`, `1 MiB`, `2g`, `1T` —
//! case-insensitive, `_` allowed between digits, spaces around the unit.
//!
//! ```
//! use ferrocomm::size::parse_size;
//! assert_eq!(parse_size("64KiB"), Ok(64 << 10));
//! assert_eq!(parse_size(" 2g "), Ok(2 << 30));
//! assert!(parse_size("1.5MiB").is_err());
//! ```
//!
//! [`format_size`] writes one back for people.

use std::mem::size_of;

use ferrocomm_device::abi::ErrorBuffer;

/// Why a size did not parse; each names the text it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Nothing, or only spaces.
    #[error("empty size {0:?}: write a number of bytes, e.g. 4096, 64KiB or 1MiB")]
    Empty(String),
    /// Not a whole number with a known unit.
    #[error("{0:?} is not a size: write a whole number with an optional unit B, K/KB/KiB, M…, G…, T… (e.g. 64KiB)")]
    Invalid(String),
    /// More bytes than a `u64` holds.
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// Reads one size in bytes (see the module's description for the forms it takes).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty(text.to_owned()));
    }
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let digits: String = digits.chars().filter(|c| *c != '_').collect();
    if digits.is_empty() {
        return Err(SizeError::Invalid(text.to_owned()));
    }
    let number: u64 = digits.parse().map_err(|_| SizeError::TooLarge(text.to_owned()))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(SizeError::Invalid(text.to_owned())),
    };
    number.checked_mul(1u64 << shift).ok_or_else(|| SizeError::TooLarge(text.to_owned()))
}

/// A size for people: `8 B`, `64 KiB`, `1.5 MiB`, `1 GiB` (one decimal when not a whole number of units),
/// the way messages and reports write one.
///
/// ```
/// use ferrocomm::size::format_size;
/// assert_eq!(format_size(1536 << 10), "1.5 MiB");
/// assert_eq!(format_size(64 << 10), "64 KiB");
/// ```
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >= 1u64 << (10 * (unit + 1)) {
        unit += 1;
    }
    let scale = 1u64 << (10 * unit);
    if bytes.is_multiple_of(scale) {
        format!("{} {}", bytes / scale, UNITS[unit])
    } else {
        format!("{:.1} {}", bytes as f64 / scale as f64, UNITS[unit])
    }
}

/// Every allocation starts on this boundary (what `cuMemAlloc` guarantees, and what 16-byte vector
/// accesses and TMA need).
pub const ALIGN: usize = 256;

/// Bytes of a rank's device error buffer, rounded to the allocation granule.
pub(crate) const ERROR_BUFFER_BYTES: usize = size_of::<ErrorBuffer>().next_multiple_of(ALIGN);

/// Why [`allocation_bytes`] refuses; the runtime's [`Error`](crate::Error) takes it as `SizeOverflow` or
/// `TeamConfig`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// The byte size does not fit in `usize` (or far enough below `isize::MAX` for pointer offsets).
    #[error("{len} elements of {elem_bytes} bytes overflow the address space; allocate fewer elements")]
    Overflow {
        /// Elements requested.
        len: usize,
        /// Bytes per element.
        elem_bytes: usize,
    },
    /// The element type needs more alignment than an allocation has.
    #[error("an element alignment of {align} exceeds the {ALIGN}-byte allocation alignment")]
    Alignment {
        /// The type's alignment.
        align: usize,
    },
}

/// The bytes each rank allocates for `len` elements of `T`: rounded up to [`ALIGN`], at least one granule
/// (so an empty buffer still has a real, aligned address to hand a kernel).
pub fn allocation_bytes<T>(len: usize) -> Result<usize, AllocationError> {
    let elem_bytes = size_of::<T>();
    if std::mem::align_of::<T>() > ALIGN {
        return Err(AllocationError::Alignment { align: std::mem::align_of::<T>() });
    }
    let overflow = || AllocationError::Overflow { len, elem_bytes };
    let bytes = len.checked_mul(elem_bytes).ok_or_else(overflow)?;
    // Device addresses are 64-bit and allocations must stay far below isize::MAX for pointer offsets.
    if bytes > isize::MAX as usize - ALIGN {
        return Err(overflow());
    }
    Ok(bytes.max(1).next_multiple_of(ALIGN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses() {
        for (text, want) in [
            ("4096", 4096),
            ("8B", 8),
            ("64K", 64 << 10),
            ("64kb", 64 << 10),
            ("64KiB", 64 << 10),
            (" 1 MiB ", 1 << 20),
            ("512m", 512 << 20),
            ("2G", 2 << 30),
            ("1T", 1 << 40),
            ("1_024", 1024),
            ("0", 0),
        ] {
            assert_eq!(parse_size(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn bad_sizes_are_named() {
        assert_eq!(parse_size("  "), Err(SizeError::Empty("  ".into())));
        assert_eq!(parse_size("1.5MiB"), Err(SizeError::Invalid("1.5MiB".into())));
        assert_eq!(parse_size("MiB"), Err(SizeError::Invalid("MiB".into())));
        assert_eq!(parse_size("3 parsecs"), Err(SizeError::Invalid("3 parsecs".into())));
        assert_eq!(parse_size("99999999999999999999"), Err(SizeError::TooLarge("99999999999999999999".into())));
        assert_eq!(parse_size("16777216T"), Err(SizeError::TooLarge("16777216T".into())));
    }
}

#[cfg(test)]
mod allocation_tests {
    use super::*;
    use ferrocomm_device::abi::ErrorBuffer;

    #[test]
    fn sizes_round_to_the_granule() {
        assert_eq!(allocation_bytes::<u32>(0).unwrap(), 256);
        assert_eq!(allocation_bytes::<u32>(64).unwrap(), 256);
        assert_eq!(allocation_bytes::<u32>(65).unwrap(), 512);
        assert_eq!(allocation_bytes::<u8>(1 << 30).unwrap(), 1 << 30);
    }

    #[test]
    fn overflow_is_an_error_not_a_wrap() {
        let e = allocation_bytes::<u64>(usize::MAX / 4).unwrap_err();
        assert!(matches!(e, AllocationError::Overflow { elem_bytes: 8, .. }), "{e}");
        assert!(allocation_bytes::<u8>(isize::MAX as usize).is_err());
    }

    #[test]
    fn the_error_buffer_fits_its_allocation() {
        assert!(ERROR_BUFFER_BYTES >= size_of::<ErrorBuffer>());
        assert_eq!(ERROR_BUFFER_BYTES % ALIGN, 0);
    }
}
