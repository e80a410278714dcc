//! The kernel state a proxy owns, read in the guest and normalised so that
//! two proxies' states diff line by line: IPVS services and destinations
//! sorted (`ipvsadm -Sn`), kube-ipvs0's addresses, each KUBE-* ipset's
//! type, header (without its random initval) and sorted members, and the
//! KUBE-* chains of nat and filter per family with their rules in order
//! (chains sorted by name, counters dropped) and the jumps to them from
//! the built-in chains.
//!
//! Five commands in all: a process costs ~0.1 s in the emulated guest, and
//! the runner takes a snapshot every second while it waits for one to
//! hold still.

use std::{
    io::Read,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::marker_addresses::{REAL4, REAL6, VIP4, VIP6};

/// How long one of the five reads may take: seconds in the emulated
/// guest at the most. A read that hangs (a tool stuck in the kernel, a
/// dump that never ends) fails the snapshot, and so the scenario, with
/// its name, instead of holding the whole run until the guest's timeout.
const READ_LIMIT: Duration = Duration::from_secs(30);

fn output(program: &str, args: &[&str]) -> Result<(bool, String)> {
    let mut child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {program}"))?;
    // The output is read on a thread of its own: a pipe the program fills
    // before it exits would otherwise block it forever.
    let mut stdout = child.stdout.take().context("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        stdout.read_to_end(&mut text).map(|_| text)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > READ_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{program} {} did not finish in {}s",
                args.join(" "),
                READ_LIMIT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let text = reader
        .join()
        .map_err(|_| anyhow::anyhow!("reading {program}'s output panicked"))?
        .with_context(|| format!("reading {program}'s output"))?;
    Ok((
        status.success(),
        String::from_utf8_lossy(&text).into_owned(),
    ))
}

fn required(program: &str, args: &[&str]) -> Result<String> {
    let (ok, text) = output(program, args)?;
    if !ok {
        bail!("{program} {} failed", args.join(" "));
    }
    Ok(text)
}

fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// `ipset list`, KUBE-* sets only, as sorted "SET Type: ...", "SET
/// Header: ..." and "SET member M" lines.
pub fn ipsets(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut set = String::new();
    let mut members = false;
    for line in list.lines() {
        if let Some(name) = line.strip_prefix("Name: ") {
            set = name.trim().to_owned();
            members = false;
            continue;
        }
        if !set.starts_with("KUBE-") {
            continue;
        }
        if line.starts_with("Type:") {
            out.push(format!("{set} {line}"));
        } else if line.starts_with("Header:") {
            let header: Vec<&str> = line.split(' ').collect();
            let mut kept = Vec::new();
            let mut skip = false;
            for word in header {
                if skip {
                    skip = false;
                } else if word == "initval" {
                    skip = true;
                } else {
                    kept.push(word);
                }
            }
            out.push(format!("{set} {}", kept.join(" ")));
        } else if line.starts_with("Members:") {
            members = true;
        } else if members && !line.trim().is_empty() {
            out.push(format!("{set} member {line}"));
        }
    }
    sorted(out)
}

/// The one chain whose rules upstream writes in no fixed order.
const UNORDERED_CHAIN: &str = "KUBE-IPVS-OUT-FILTER";

/// One table of an `iptables-save` of all tables: the KUBE-* chains
/// (declarations by name, then each chain's rules in order, but
/// KUBE-IPVS-OUT-FILTER's sorted) and the built-in chains' jumps to them.
pub fn iptables_table(save: &str, table: &str) -> Vec<String> {
    let mut in_table = false;
    let mut decls = Vec::new();
    let mut rules: Vec<(String, usize, String)> = Vec::new();
    for (n, line) in save.lines().enumerate() {
        if let Some(name) = line.strip_prefix('*') {
            in_table = name.trim() == table;
            continue;
        }
        if !in_table {
            continue;
        }
        if line.starts_with(":KUBE-") {
            decls.push(line.split_whitespace().next().unwrap_or("").to_owned());
        } else if let Some(rest) = line.strip_prefix("-A ") {
            let chain = rest.split_whitespace().next().unwrap_or("");
            if chain.starts_with("KUBE-") || line.contains(" -j KUBE-") {
                let normal: Vec<&str> = line.split_whitespace().collect();
                // Upstream appends these DROPs while it ranges over its
                // service map, so their order changes from one sync to
                // the next; each matches its own address, protocol and
                // port, so the order means nothing and they compare as
                // a set.
                let position = if chain == UNORDERED_CHAIN { 0 } else { n };
                rules.push((chain.to_owned(), position, normal.join(" ")));
            }
        }
    }
    decls.sort();
    rules.sort();
    decls
        .into_iter()
        .chain(rules.into_iter().map(|(_, _, rule)| rule))
        .collect()
}

/// The snapshot, as the runner diffs it.
pub fn take() -> Result<String> {
    let mut out = vec!["## ipvs".to_owned()];
    out.extend(sorted(
        required("ipvsadm", &["-Sn"])?
            .lines()
            .map(str::to_owned)
            .collect(),
    ));
    out.push("## kube-ipvs0".to_owned());
    let (exists, addrs) =
        output("ip", &["-o", "addr", "show", "dev", "kube-ipvs0"])?;
    if exists {
        out.push("link kube-ipvs0".to_owned());
        out.extend(sorted(
            addrs
                .lines()
                .filter_map(|l| {
                    let words: Vec<&str> = l.split_whitespace().collect();
                    Some(format!("{} {}", words.get(2)?, words.get(3)?))
                })
                .collect(),
        ));
    }
    out.push("## ipsets".to_owned());
    out.extend(ipsets(&required("ipset", &["list"])?));
    for save in ["iptables-save", "ip6tables-save"] {
        // A failed save gives empty sections, on both proxies' side alike.
        let text = required(save, &[])?;
        for table in ["nat", "filter"] {
            out.push(format!("## {save} -t {table}"));
            out.extend(iptables_table(&text, table));
        }
    }
    let mut text = out.join("\n");
    text.push('\n');
    Ok(text)
}

/// The marker's addresses: every snapshot of a synced proxy has them.
fn is_marker(line: &str) -> bool {
    [
        VIP4.to_string(),
        VIP6.to_string(),
        REAL4.to_string(),
        REAL6.to_string(),
    ]
    .iter()
    .any(|addr| line.contains(addr.as_str()))
}

/// What a snapshot of a synced proxy lacks. With `services` Services that
/// a proxy programs (the marker aside), a virtual server, a kube-ipvs0
/// address and an ipset member besides the marker's; and whatever the
/// scenario, for each of `families`, rules in nat and filter (the marker
/// is a Service, and a proxy that has synced it has written them). Two
/// snapshots that miss a section alike would compare equal.
pub fn lacking(
    snapshot: &str,
    services: usize,
    families: usize,
) -> Vec<String> {
    let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in snapshot.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            sections.push((name, Vec::new()));
        } else if let Some((_, lines)) = sections.last_mut() {
            lines.push(line);
        }
    }
    let section = |name: &str| {
        sections
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, lines)| lines.as_slice())
    };
    let mut lacks = Vec::new();
    let mut require =
        |name: &str, what: &str, wanted: &dyn Fn(&str) -> bool| match section(
            name,
        ) {
            None => lacks.push(format!("no section {name}")),
            Some(lines) if !lines.iter().any(|l| wanted(l)) => {
                lacks.push(format!("{what} in {name}"))
            }
            Some(_) => {}
        };
    if services > 0 {
        require("ipvs", "a virtual server besides the marker's", &|l| {
            l.starts_with("-A ") && !is_marker(l)
        });
        require("kube-ipvs0", "an address besides the marker's", &|l| {
            l.starts_with("inet") && !is_marker(l)
        });
        require("ipsets", "a member besides the marker's", &|l| {
            l.contains(" member ") && !is_marker(l)
        });
    }
    for save in ["iptables-save", "ip6tables-save"].iter().take(families) {
        for table in ["nat", "filter"] {
            require(&format!("{save} -t {table}"), "a rule", &|l| {
                l.starts_with("-A ")
            });
        }
    }
    lacks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synced snapshot of one ClusterIP Service besides the marker, in
    /// both families.
    const SYNCED: &str = "## ipvs\n\
        -A -t 198.18.0.10:80 -s rr\n\
        -A -t 198.18.255.254:1003 -s rr\n\
        -A -t [2001:db8:42::fffe]:1003 -s rr\n\
        ## kube-ipvs0\n\
        link kube-ipvs0\n\
        inet 198.18.0.10/32\n\
        inet 198.18.255.254/32\n\
        inet6 2001:db8:42::fffe/128\n\
        ## ipsets\n\
        KUBE-CLUSTER-IP Type: hash:ip,port\n\
        KUBE-CLUSTER-IP member 198.18.0.10,tcp:80\n\
        KUBE-CLUSTER-IP member 198.18.255.254,tcp:1003\n\
        KUBE-6-CLUSTER-IP member 2001:db8:42::fffe,tcp:1003\n\
        ## iptables-save -t nat\n\
        :KUBE-SERVICES\n\
        -A PREROUTING -j KUBE-SERVICES\n\
        ## iptables-save -t filter\n\
        -A FORWARD -j KUBE-FORWARD\n\
        ## ip6tables-save -t nat\n\
        -A PREROUTING -j KUBE-SERVICES\n\
        ## ip6tables-save -t filter\n\
        -A FORWARD -j KUBE-FORWARD\n";

    fn without(snapshot: &str, gone: &[&str]) -> String {
        snapshot
            .lines()
            .filter(|l| !gone.iter().any(|g| l.contains(g)))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn a_synced_snapshot_lacks_nothing() {
        assert_eq!(lacking(SYNCED, 1, 2), Vec::<String>::new());
    }

    #[test]
    fn only_the_markers_is_not_enough_where_there_are_services() {
        let only_marker = without(SYNCED, &["198.18.0.10"]);
        assert_eq!(
            lacking(&only_marker, 1, 2),
            [
                "a virtual server besides the marker's in ipvs",
                "an address besides the marker's in kube-ipvs0",
                "a member besides the marker's in ipsets",
            ]
        );
        // Without Services, the marker's alone is right.
        assert_eq!(lacking(&only_marker, 0, 2), Vec::<String>::new());
    }

    #[test]
    fn an_empty_iptables_table_is_lacking_in_the_families_synced() {
        let empty_v6_nat = SYNCED.replace(
            "## ip6tables-save -t nat\n-A PREROUTING -j KUBE-SERVICES\n",
            "## ip6tables-save -t nat\n",
        );
        assert_eq!(
            lacking(&empty_v6_nat, 1, 2),
            ["a rule in ip6tables-save -t nat"]
        );
        assert_eq!(lacking(&empty_v6_nat, 1, 1), Vec::<String>::new());
        let no_v4_filter = without(SYNCED, &["KUBE-FORWARD"]);
        assert_eq!(
            lacking(&no_v4_filter, 0, 1),
            ["a rule in iptables-save -t filter"]
        );
    }

    #[test]
    fn a_missing_section_is_lacking() {
        let no_ipsets =
            without(SYNCED, &["## ipsets", "KUBE-CLUSTER-IP", "KUBE-6"]);
        assert_eq!(lacking(&no_ipsets, 1, 2), ["no section ipsets"]);
        assert_eq!(lacking("", 0, 1).len(), 2);
    }

    #[test]
    fn ipsets_keep_kube_sets_without_initval() {
        let list = "Name: KUBE-CLUSTER-IP\nType: hash:ip,port\nRevision: 6\n\
                    Header: family inet hashsize 1024 maxelem 65536 initval 0x1234abcd bucketsize 12\n\
                    Size in memory: 200\nReferences: 2\nNumber of entries: 2\nMembers:\n\
                    198.18.0.2,tcp:80\n198.18.0.1,tcp:80\n\n\
                    Name: other\nType: hash:ip\nHeader: family inet\nMembers:\n1.2.3.4\n";
        assert_eq!(
            ipsets(list),
            [
                "KUBE-CLUSTER-IP Header: family inet hashsize 1024 maxelem 65536 bucketsize 12",
                "KUBE-CLUSTER-IP Type: hash:ip,port",
                "KUBE-CLUSTER-IP member 198.18.0.1,tcp:80",
                "KUBE-CLUSTER-IP member 198.18.0.2,tcp:80",
            ]
        );
    }

    #[test]
    fn iptables_chains_by_name_rules_in_order() {
        let save = "# Generated\n*filter\n:INPUT ACCEPT [0:0]\n:KUBE-FORWARD - [0:0]\n\
                    -A INPUT -j KUBE-FORWARD\n-A OTHER -j ACCEPT\n\
                    -A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT\nCOMMIT\n\
                    *nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n\
                    -A KUBE-SERVICES  -j KUBE-MARK-MASQ\n-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
                    -A KUBE-SERVICES -j RETURN\nCOMMIT\n";
        assert_eq!(
            iptables_table(save, "nat"),
            [
                ":KUBE-MARK-MASQ",
                ":KUBE-SERVICES",
                "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
                "-A KUBE-SERVICES -j KUBE-MARK-MASQ",
                "-A KUBE-SERVICES -j RETURN",
            ]
        );
        assert_eq!(
            iptables_table(save, "filter"),
            [
                ":KUBE-FORWARD",
                "-A INPUT -j KUBE-FORWARD",
                "-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT",
            ]
        );
    }

    #[test]
    fn out_filter_drops_compare_in_any_order() {
        let drop = |addr: &str| {
            format!(
                "-A KUBE-IPVS-OUT-FILTER -s {addr}/32 -m ipvs --vproto 6 \
                 --vaddr {addr} --vport 80 -j DROP"
            )
        };
        let save = |first: &str, second: &str| {
            format!(
                "*filter\n:KUBE-IPVS-OUT-FILTER - [0:0]\n:KUBE-FORWARD - [0:0]\n\
                 -A KUBE-FORWARD -j DROP\n-A KUBE-FORWARD -j ACCEPT\n\
                 {}\n{}\nCOMMIT\n",
                drop(first),
                drop(second)
            )
        };
        let one = iptables_table(&save("198.18.0.9", "198.18.0.1"), "filter");
        let other = iptables_table(&save("198.18.0.1", "198.18.0.9"), "filter");
        assert_eq!(one, other);
        // Every other chain keeps its order.
        assert_eq!(one[2], "-A KUBE-FORWARD -j DROP");
        assert_eq!(one[3], "-A KUBE-FORWARD -j ACCEPT");
        assert_eq!(one.len(), 6);
    }
}
