//! An in-memory iptables that understands the restore syntax we emit and
//! fails where the tools fail.
//!
//! A restore is atomic per table, as with the real tools: on any error
//! nothing of the table is applied, and the error names the failing line.
//! Rules are stored in the form iptables-save prints them
//! (see the private `canon` module), so the model's dumps compare with the kernel's.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    canon::{canonical_rule, tokenize},
    IpFamily, Iptables,
};
use crate::kernel::{DetachedRead, ErrorKind, KernelError};

/// Targets built into iptables (not chains), and the tables they are
/// valid in (`None`: any).
const TARGETS: [(&str, Option<&[&str]>); 10] = [
    ("ACCEPT", None),
    ("DROP", None),
    ("RETURN", None),
    ("MARK", None),
    ("LOG", None),
    ("MASQUERADE", Some(&["nat"])),
    ("SNAT", Some(&["nat"])),
    ("DNAT", Some(&["nat"])),
    ("REJECT", Some(&["filter", "mangle", "raw", "security"])),
    ("CONNMARK", None),
];

fn builtin_chains(table: &str) -> Option<&'static [&'static str]> {
    Some(match table {
        "filter" | "security" => &["INPUT", "FORWARD", "OUTPUT"],
        "nat" => &["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
        "mangle" => {
            &["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]
        }
        "raw" => &["PREROUTING", "OUTPUT"],
        _ => return None,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    name: String,
    /// Built-in chains with their policy, in the kernel's hook order.
    builtin: Vec<(&'static str, String)>,
    /// Every chain's rules (built-in and user), canonical specs.
    rules: BTreeMap<String, Vec<String>>,
}

impl Table {
    fn new(name: &str, builtin: &'static [&'static str]) -> Self {
        Self {
            name: name.to_owned(),
            builtin: builtin
                .iter()
                .map(|c| (*c, "ACCEPT".to_owned()))
                .collect(),
            rules: builtin
                .iter()
                .map(|c| ((*c).to_owned(), Vec::new()))
                .collect(),
        }
    }

    fn is_builtin(&self, chain: &str) -> bool {
        self.builtin.iter().any(|(c, _)| *c == chain)
    }

    fn references(&self, chain: &str) -> usize {
        self.rules
            .values()
            .flatten()
            .filter(|spec| jump_target(spec) == Some(chain))
            .count()
    }

    fn render(&self) -> String {
        let mut out = format!("*{}\n", self.name);
        for (c, policy) in &self.builtin {
            out.push_str(&format!(":{c} {policy} [0:0]\n"));
        }
        let user: Vec<&String> =
            self.rules.keys().filter(|c| !self.is_builtin(c)).collect();
        for c in &user {
            out.push_str(&format!(":{c} - [0:0]\n"));
        }
        let order = self
            .builtin
            .iter()
            .map(|(c, _)| *c)
            .chain(user.iter().map(|c| c.as_str()));
        for c in order {
            for spec in self.rules.get(c).into_iter().flatten() {
                out.push_str(&format!("-A {c} {spec}\n"));
            }
        }
        out.push_str("COMMIT\n");
        out
    }
}

fn jump_target(spec: &str) -> Option<&str> {
    let mut words = spec.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-j" || w == "-g" {
            return words.next();
        }
    }
    None
}

/// The in-memory iptables of both families.
#[derive(Debug, Clone, Default)]
pub struct IptablesModel {
    tables: BTreeMap<(IpFamily, String), Table>,
    /// When set, `-m set --match-set NAME` must name one of these (the
    /// kernel refuses a rule on a missing set).
    sets: Option<BTreeSet<String>>,
    /// How many restores and saves ran, for tests that count tool runs.
    pub restores: usize,
    pub saves: usize,
}

impl IptablesModel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Only these ipsets exist; rules on other sets fail.
    pub fn with_sets<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.sets = Some(names.into_iter().map(Into::into).collect());
        self
    }

    fn dump(
        &self,
        family: IpFamily,
        table: &str,
    ) -> Result<String, KernelError> {
        let builtin = builtin_chains(table).ok_or_else(|| {
            KernelError::invalid(
                format!("{family} table {table}"),
                "table does not exist",
            )
        })?;
        Ok(match self.tables.get(&(family, table.to_owned())) {
            Some(t) => t.render(),
            None => Table::new(table, builtin).render(),
        })
    }

    /// Applies a payload, all or nothing per table; the error message is
    /// `line N: why`.
    pub fn apply(
        &mut self,
        family: IpFamily,
        payload: &str,
    ) -> Result<(), KernelError> {
        let object = format!("{} restore", tool(family));
        let fail = |line: usize, kind: ErrorKind, why: String| {
            KernelError::new(kind, &object, format!("line {line}: {why}"))
        };
        // Tables committed so far by this payload; applied only at the end
        // of their COMMIT, like the tools.
        let mut open: Option<Table> = None;
        let mut last = 0;
        for (idx, raw) in payload.lines().enumerate() {
            let n = idx + 1;
            last = n;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(name) = line.strip_prefix('*') {
                if open.is_some() {
                    return Err(fail(
                        n,
                        ErrorKind::Invalid,
                        "COMMIT expected".into(),
                    ));
                }
                let builtin = builtin_chains(name).ok_or_else(|| {
                    fail(
                        n,
                        ErrorKind::Invalid,
                        format!("table name '{name}' invalid"),
                    )
                })?;
                let t = self
                    .tables
                    .get(&(family, name.to_owned()))
                    .cloned()
                    .unwrap_or_else(|| Table::new(name, builtin));
                open = Some(t);
                continue;
            }
            let Some(t) = open.as_mut() else {
                return Err(fail(
                    n,
                    ErrorKind::Invalid,
                    "no table specified".into(),
                ));
            };
            if line == "COMMIT" {
                if let Some(t) = open.take() {
                    self.tables.insert((family, t.name.clone()), t);
                }
                continue;
            }
            self.line(family, t, line)
                .map_err(|(kind, why)| fail(n, kind, why))?;
        }
        if open.is_some() {
            return Err(fail(
                last,
                ErrorKind::Invalid,
                "COMMIT expected".into(),
            ));
        }
        Ok(())
    }

    fn line(
        &self,
        family: IpFamily,
        t: &mut Table,
        line: &str,
    ) -> Result<(), (ErrorKind, String)> {
        let invalid = |why: String| (ErrorKind::Invalid, why);
        let not_found = |what: &str| {
            (
                ErrorKind::NotFound,
                format!("{what}: no chain/target/match by that name"),
            )
        };
        if let Some(decl) = line.strip_prefix(':') {
            let mut words = decl.split_whitespace();
            let (Some(name), Some(policy)) = (words.next(), words.next())
            else {
                return Err(invalid(format!("bad chain line {line:?}")));
            };
            if t.is_builtin(name) {
                if !matches!(policy, "ACCEPT" | "DROP") {
                    return Err(invalid(format!("bad policy {policy}")));
                }
                if let Some(p) = t.builtin.iter_mut().find(|(c, _)| *c == name)
                {
                    p.1 = policy.to_owned();
                }
            } else {
                if policy != "-" {
                    return Err(invalid(format!(
                        "user chain {name} has no policy"
                    )));
                }
                if name.len() > 28 || name.starts_with('-') {
                    return Err(invalid(format!(
                        "invalid chain name {name:?}"
                    )));
                }
                // Declaring an existing chain flushes it (--noflush).
                t.rules.insert(name.to_owned(), Vec::new());
            }
            return Ok(());
        }
        let words = tokenize(line).map_err(invalid)?;
        let (cmd, rest) = words
            .split_first()
            .ok_or_else(|| invalid("empty command".into()))?;
        let chain = rest.first().map(String::as_str);
        match (cmd.as_str(), chain) {
            ("-N", Some(c)) => {
                if t.rules.contains_key(c) {
                    return Err((
                        ErrorKind::Exists,
                        format!("chain {c} already exists"),
                    ));
                }
                t.rules.insert(c.to_owned(), Vec::new());
            }
            ("-F", Some(c)) => {
                t.rules.get_mut(c).ok_or_else(|| not_found(c))?.clear();
            }
            ("-F", None) => t.rules.values_mut().for_each(Vec::clear),
            ("-X", Some(c)) => {
                if t.is_builtin(c) {
                    return Err(invalid(format!(
                        "cannot delete built-in chain {c}"
                    )));
                }
                let rules = t.rules.get(c).ok_or_else(|| not_found(c))?;
                if !rules.is_empty() || t.references(c) > 0 {
                    return Err((
                        ErrorKind::Other,
                        format!("chain {c}: device or resource busy"),
                    ));
                }
                t.rules.remove(c);
            }
            ("-A" | "-I" | "-D", Some(c)) => {
                let mut spec_words = rest.get(1..).unwrap_or_default();
                let mut position = None;
                if cmd != "-A" {
                    if let Some(p) =
                        spec_words.first().and_then(|w| w.parse::<usize>().ok())
                    {
                        position = Some(p);
                        spec_words = spec_words.get(1..).unwrap_or_default();
                    }
                }
                if !t.rules.contains_key(c) {
                    return Err(not_found(c));
                }
                if cmd == "-D" && position.is_some() && spec_words.is_empty() {
                    let p = position.unwrap_or(0);
                    let rules =
                        t.rules.get_mut(c).ok_or_else(|| not_found(c))?;
                    if p == 0 || p > rules.len() {
                        return Err((
                            ErrorKind::NotFound,
                            "index of deletion too big".into(),
                        ));
                    }
                    rules.remove(p - 1);
                    return Ok(());
                }
                let spec =
                    canonical_rule(family, spec_words).map_err(invalid)?;
                if cmd != "-D" {
                    self.check_rule(t, &spec)?;
                }
                let rules = t.rules.get_mut(c).ok_or_else(|| not_found(c))?;
                match cmd.as_str() {
                    "-A" => rules.push(spec),
                    "-I" => {
                        let p = position.unwrap_or(1);
                        if p == 0 || p > rules.len() + 1 {
                            return Err((
                                ErrorKind::Invalid,
                                "index of insertion too big".into(),
                            ));
                        }
                        rules.insert(p - 1, spec);
                    }
                    _ => {
                        let at = rules.iter().position(|r| *r == spec).ok_or((
                            ErrorKind::NotFound,
                            "bad rule (does a matching rule exist in that chain?)"
                                .to_owned(),
                        ))?;
                        rules.remove(at);
                    }
                }
            }
            _ => return Err(invalid(format!("unknown command {line:?}"))),
        }
        Ok(())
    }

    /// What the kernel checks when a rule is added: the target exists and
    /// suits the table, the sets it matches exist.
    fn check_rule(
        &self,
        t: &Table,
        spec: &str,
    ) -> Result<(), (ErrorKind, String)> {
        if let Some(target) = jump_target(spec) {
            match TARGETS.iter().find(|(name, _)| *name == target) {
                Some((_, Some(tables)))
                    if !tables.contains(&t.name.as_str()) =>
                {
                    return Err((
                        ErrorKind::Invalid,
                        format!(
                            "target {target} is not valid in table {}",
                            t.name
                        ),
                    ));
                }
                Some(_) => {}
                None if t.rules.contains_key(target) => {
                    if t.is_builtin(target) {
                        return Err((
                            ErrorKind::Invalid,
                            format!("cannot jump to built-in chain {target}"),
                        ));
                    }
                }
                None => {
                    return Err((
                        ErrorKind::NotFound,
                        format!("chain '{target}' does not exist"),
                    ));
                }
            }
        }
        if let Some(sets) = &self.sets {
            let mut words = spec.split_whitespace();
            while let Some(w) = words.next() {
                if w == "--match-set" {
                    let name = words.next().unwrap_or_default();
                    if !sets.contains(name) {
                        return Err((
                            ErrorKind::NotFound,
                            format!("set {name} doesn't exist"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn tool(family: IpFamily) -> &'static str {
    match family {
        IpFamily::V4 => "iptables",
        IpFamily::V6 => "ip6tables",
    }
}

impl Iptables for IptablesModel {
    async fn save(
        &mut self,
        family: IpFamily,
        table: &str,
    ) -> Result<String, KernelError> {
        self.saves += 1;
        self.dump(family, table)
    }

    /// The table as it is now: a read that finished at once.
    fn save_detached(
        &self,
        family: IpFamily,
        table: &str,
    ) -> impl DetachedRead<String> + use<> {
        std::future::ready(self.dump(family, table))
    }

    async fn restore(
        &mut self,
        family: IpFamily,
        payload: &str,
    ) -> Result<(), KernelError> {
        self.restores += 1;
        self.apply(family, payload)
    }
}

#[cfg(test)]
mod tests;
