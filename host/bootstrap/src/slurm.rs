//! Slurm's tasks per node: the one layout field Slurm does not give as a single number.
//!
//! `SLURM_TASKS_PER_NODE` lists the tasks of every node of the step in a compressed form — `4`, `4(x2)`,
//! `2(x3),1` — so a node's count is its entry at `SLURM_NODEID`. `SLURM_NTASKS_PER_NODE` holds only what
//! `--ntasks-per-node` asked for, which the real distribution may not match, so it comes second.

use crate::env::{Vars, parse_num};
use crate::error::BootstrapError;

/// This node's number of tasks, with the name of the variable it came from; `world` (every task on
/// one node) when Slurm says nothing about it.
pub(crate) fn local_world(vars: &Vars<'_>, world: usize) -> Result<(usize, &'static str), BootstrapError> {
    const LIST: &str = "SLURM_TASKS_PER_NODE";
    if let Some(value) = vars.get(LIST) {
        let counts = parse_tasks_per_node(&value).map_err(|why| BootstrapError::BadVar {
            var: LIST,
            value: value.clone(),
            why,
            fix: "expected a list like 4, 4(x2) or 2(x3),1; set FERROCOMM_LOCAL_WORLD_SIZE to override".into(),
        })?;
        return match vars.num("SLURM_NODEID")? {
            Some(node) => counts.get(node).map(|&n| (n, LIST)).ok_or_else(|| BootstrapError::BadVar {
                var: "SLURM_NODEID",
                value: node.to_string(),
                why: format!("{LIST}={value} lists only {} nodes", counts.len()),
                fix: "set FERROCOMM_LOCAL_WORLD_SIZE to this node's number of tasks".into(),
            }),
            None if counts.iter().all(|&n| n == counts[0]) => Ok((counts[0], LIST)),
            None => Err(BootstrapError::BadVar {
                var: LIST,
                value,
                why: "the nodes run different numbers of tasks and SLURM_NODEID is not set".into(),
                fix: "set FERROCOMM_LOCAL_WORLD_SIZE to this node's number of tasks".into(),
            }),
        };
    }
    const PER_NODE: &str = "SLURM_NTASKS_PER_NODE";
    if let Some(value) = vars.get(PER_NODE) {
        return Ok((parse_num(PER_NODE, &value)?, PER_NODE));
    }
    Ok((world, "SLURM_NTASKS"))
}

/// Expands `2(x3),1` into `[2, 2, 2, 1]`; the error says what is wrong.
pub(crate) fn parse_tasks_per_node(value: &str) -> Result<Vec<usize>, String> {
    let mut counts = Vec::new();
    for item in value.split(',').map(str::trim) {
        let (count, repeat) = match item.split_once('(') {
            None => (item, "x1)"),
            Some((count, rest)) => (count, rest),
        };
        let count: usize = count.parse().map_err(|_| format!("{item:?} does not start with a number"))?;
        let repeat: usize = repeat
            .strip_prefix('x')
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("{item:?} is not of the form N or N(xM)"))?;
        if count == 0 || repeat == 0 {
            return Err(format!("{item:?} counts zero tasks or nodes"));
        }
        // A garbage repeat count must not allocate without bound; no job has a million nodes.
        if counts.len() + repeat > 1 << 20 {
            return Err(format!("{item:?} lists more nodes than any job has"));
        }
        counts.extend(std::iter::repeat_n(count, repeat));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn parses_the_compressed_forms() {
        assert_eq!(parse_tasks_per_node("4"), Ok(vec![4]));
        assert_eq!(parse_tasks_per_node("4(x2)"), Ok(vec![4, 4]));
        assert_eq!(parse_tasks_per_node("2(x3),1"), Ok(vec![2, 2, 2, 1]));
        assert_eq!(parse_tasks_per_node("8, 8(x2)"), Ok(vec![8, 8, 8]));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "x", "4(2)", "4(x)", "4(x2", "0", "4(x0)", "-1", "1(x99999999999)"] {
            assert!(parse_tasks_per_node(bad).is_err(), "{bad:?} was accepted");
        }
    }

    fn with(pairs: &[(&str, &str)], world: usize) -> Result<(usize, &'static str), BootstrapError> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let get = |k: &str| map.get(k).cloned();
        local_world(&Vars(&get), world)
    }

    #[test]
    fn picks_this_node() {
        let tpn = ("SLURM_TASKS_PER_NODE", "4(x2),2");
        assert_eq!(with(&[tpn, ("SLURM_NODEID", "2")], 10).unwrap(), (2, "SLURM_TASKS_PER_NODE"));
        assert_eq!(with(&[tpn, ("SLURM_NODEID", "1")], 10).unwrap(), (4, "SLURM_TASKS_PER_NODE"));
        assert_eq!(with(&[("SLURM_TASKS_PER_NODE", "4(x2)")], 8).unwrap(), (4, "SLURM_TASKS_PER_NODE"));
        assert_eq!(with(&[("SLURM_NTASKS_PER_NODE", "3")], 6).unwrap(), (3, "SLURM_NTASKS_PER_NODE"));
        assert_eq!(with(&[], 6).unwrap(), (6, "SLURM_NTASKS"));
    }

    #[test]
    fn uneven_nodes_need_the_node_id() {
        let err = with(&[("SLURM_TASKS_PER_NODE", "4,2")], 6).unwrap_err().to_string();
        assert!(err.contains("SLURM_NODEID") && err.contains("FERROCOMM_LOCAL_WORLD_SIZE"), "{err}");
        let err = with(&[("SLURM_TASKS_PER_NODE", "4,2"), ("SLURM_NODEID", "2")], 6).unwrap_err().to_string();
        assert!(err.contains("SLURM_NODEID=\"2\"") && err.contains("only 2 nodes"), "{err}");
    }
}
