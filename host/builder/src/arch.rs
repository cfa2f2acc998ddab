//! GPU architectures a PTX module is built for.

use std::fmt;
use std::str::FromStr;

use crate::BuildError;

/// A CUDA compute capability, spelled the way `-Ctarget-cpu` and `ptxas -arch` spell it (`sm_90`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Arch(u32);

impl Arch {
    /// Ampere (A100).
    pub const SM_80: Arch = Arch(80);
    /// Hopper (H100, H200).
    pub const SM_90: Arch = Arch(90);
    /// What a build makes when neither the builder nor `FERROCOMM_PTX_ARCHES` says otherwise.
    pub const DEFAULT: [Arch; 2] = [Arch::SM_80, Arch::SM_90];
    /// The oldest architecture with the scoped `.release`/`.acquire` memory model the device library uses.
    pub const OLDEST_SUPPORTED: Arch = Arch(70);

    /// The numeric compute capability (`90` for `sm_90`).
    pub fn compute_capability(self) -> u32 {
        self.0
    }

    /// Parses a comma-separated list such as `sm_80,sm_90`, as `FERROCOMM_PTX_ARCHES` holds it.
    pub fn parse_list(list: &str) -> Result<Vec<Arch>, BuildError> {
        let mut arches: Vec<Arch> =
            list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::parse).collect::<Result<_, _>>()?;
        arches.sort();
        arches.dedup();
        if arches.is_empty() {
            return Err(BuildError::BadArch { given: list.to_owned() });
        }
        Ok(arches)
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

impl FromStr for Arch {
    type Err = BuildError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BuildError::BadArch { given: s.to_owned() };
        let digits = s.strip_prefix("sm_").ok_or_else(bad)?;
        let cc: u32 = digits.parse().map_err(|_| bad())?;
        if cc < Arch::OLDEST_SUPPORTED.0 {
            return Err(bad());
        }
        Ok(Arch(cc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_sorted_and_deduplicated() {
        let arches = Arch::parse_list("sm_90, sm_80,sm_90").unwrap();
        assert_eq!(arches, vec![Arch::SM_80, Arch::SM_90]);
        assert_eq!(arches[1].to_string(), "sm_90");
    }

    #[test]
    fn rejects_what_is_not_an_arch() {
        for bad in ["", "90", "sm_", "sm_x", "compute_90", "sm_60"] {
            assert!(Arch::parse_list(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
