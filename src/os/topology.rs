//! The host's layout as the kernel exposes it: each CPU's NUMA node and physical core
//! (SMT siblings share one), and a network interface's device, its NUMA node and the CPUs
//! its interrupts are steered to. Read from a root directory (`/` on a host, a fixture tree
//! in tests) by the main thread, before any stream thread is placed.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

pub use crate::data::pin::{Cpu, Host, Nic};

/// The layout of `allowed` CPUs under `root`, and `interface`'s device.
pub fn read_host(root: &Path, allowed: &[usize], interface: Option<&str>) -> Host {
    let cpus = allowed.iter().map(|&id| cpu(root, id)).collect();
    let interface = interface.map(|name| (name.to_string(), read_nic(root, name)));
    Host { cpus, interface }
}

fn cpu(root: &Path, id: usize) -> Cpu {
    let dir = root.join(format!("sys/devices/system/cpu/cpu{id}"));
    let node = std::fs::read_dir(&dir).ok().and_then(|entries| {
        entries
            .filter_map(|e| e.ok())
            .find_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
    });
    let topo = |f: &str| number(&dir.join("topology").join(f));
    Cpu {
        id,
        node,
        // Without topology files each CPU is a core of its own.
        core: (
            topo("physical_package_id").unwrap_or(0),
            topo("core_id").unwrap_or(id),
        ),
    }
}

/// `name`'s device, or `None` for a virtual interface (no `device` link in sysfs).
pub fn read_nic(root: &Path, name: &str) -> Option<Nic> {
    let dev = root.join("sys/class/net").join(name).join("device");
    if !dev.exists() {
        return None;
    }
    // A virtio NIC's device is a child of the PCI function that has the node and MSI
    // vectors: look there when the device itself has none.
    let dev = match dev.join("msi_irqs").exists() {
        true => dev,
        false => std::fs::canonicalize(&dev)
            .ok()
            .and_then(|d| Some(d.parent()?.to_path_buf()))
            .filter(|p| p.join("msi_irqs").exists())
            .unwrap_or(dev),
    };
    let node = std::fs::read_to_string(dev.join("numa_node"))
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .and_then(|n| usize::try_from(n).ok());
    let mut irq_cpus: Vec<usize> = std::fs::read_dir(dev.join("msi_irqs"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|irq| irq_affinity(root, irq))
        .flatten()
        .collect();
    irq_cpus.sort_unstable();
    irq_cpus.dedup();
    Some(Nic {
        name: name.to_string(),
        node,
        irq_cpus,
    })
}

fn irq_affinity(root: &Path, irq: u32) -> Option<Vec<usize>> {
    let path = root.join(format!("proc/irq/{irq}/smp_affinity_list"));
    let text = std::fs::read_to_string(path).ok()?;
    crate::data::pin::parse_cpu_list(&text).ok()
}

fn number(path: &PathBuf) -> Option<usize> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The interface that holds `ip` (the local address of the test's control connection).
pub fn interface_of(ip: IpAddr) -> Option<String> {
    let ip = ip.to_canonical();
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let addr = a.address?;
        let held = match ip {
            IpAddr::V4(v4) => addr.as_sockaddr_in().map(|s| s.ip() == v4),
            IpAddr::V6(v6) => addr.as_sockaddr_in6().map(|s| s.ip() == v6),
        };
        held.unwrap_or(false).then_some(a.interface_name)
    })
}

#[cfg(test)]
pub(crate) mod fixture {
    //! A fake sysfs/procfs tree: CPUs with nodes and SMT siblings, and NICs.
    use std::path::{Path, PathBuf};

    pub struct Tree(pub PathBuf);

    impl Tree {
        pub fn new(name: &str) -> Tree {
            let dir =
                std::env::temp_dir().join(format!("pinperf-topo-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Tree(dir)
        }

        fn write(&self, rel: &str, text: &str) {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        /// CPU `id` on `node`, in physical core `core`.
        pub fn cpu(&self, id: usize, node: usize, core: usize) -> &Tree {
            let dir = format!("sys/devices/system/cpu/cpu{id}");
            std::fs::create_dir_all(self.0.join(&dir).join(format!("node{node}"))).unwrap();
            self.write(&format!("{dir}/topology/core_id"), &format!("{core}\n"));
            self.write(&format!("{dir}/topology/physical_package_id"), "0\n");
            self
        }

        /// A NIC on `node` whose IRQs `irqs` are steered to `cpus` (a CPU list).
        pub fn nic(&self, name: &str, node: i64, irqs: &[(u32, &str)]) -> &Tree {
            let dev = format!("sys/class/net/{name}/device");
            self.write(&format!("{dev}/numa_node"), &format!("{node}\n"));
            for (irq, cpus) in irqs {
                self.write(&format!("{dev}/msi_irqs/{irq}"), "msi\n");
                self.write(
                    &format!("proc/irq/{irq}/smp_affinity_list"),
                    &format!("{cpus}\n"),
                );
            }
            self
        }

        /// A virtual interface: no device.
        pub fn virtual_if(&self, name: &str) -> &Tree {
            std::fs::create_dir_all(self.0.join(format!("sys/class/net/{name}"))).unwrap();
            self
        }

        pub fn root(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::Tree;
    use super::*;

    #[test]
    fn cpus_nodes_siblings_and_a_nics_irqs_are_read() {
        let t = Tree::new("read");
        t.cpu(0, 0, 0).cpu(1, 1, 1).cpu(2, 0, 0);
        t.nic("eth0", 1, &[(40, "1"), (41, "1,3")])
            .virtual_if("veth0");
        let host = read_host(t.root(), &[0, 1, 2], Some("eth0"));
        assert_eq!(
            host.cpus[1],
            Cpu {
                id: 1,
                node: Some(1),
                core: (0, 1)
            }
        );
        assert_eq!(host.cpus[2].core, host.cpus[0].core, "SMT siblings");
        let nic = host.interface.unwrap().1.unwrap();
        assert_eq!((nic.node, nic.irq_cpus), (Some(1), vec![1, 3]));
        assert_eq!(read_nic(t.root(), "veth0"), None, "virtual");
        t.nic("eth1", -1, &[]);
        assert_eq!(read_nic(t.root(), "eth1").unwrap().node, None, "no node");
        // virtio: the net device's parent (the PCI function) has the node and vectors.
        t.nic("pci0", 1, &[(50, "0")]);
        let virtio = t.root().join("sys/class/net/pci0/device/virtio3");
        std::fs::create_dir_all(&virtio).unwrap();
        std::fs::create_dir_all(t.root().join("sys/class/net/eth2")).unwrap();
        std::os::unix::fs::symlink(&virtio, t.root().join("sys/class/net/eth2/device")).unwrap();
        let eth2 = read_nic(t.root(), "eth2").unwrap();
        assert_eq!((eth2.node, eth2.irq_cpus), (Some(1), vec![0]));
    }

    /// On this host: the loopback address is on `lo`, which has no device to follow, so
    /// `-A auto` keeps its round-robin plan; every CPU read is one this process may use.
    #[test]
    fn on_this_host_lo_is_virtual() {
        assert_eq!(
            interface_of("127.0.0.1".parse().unwrap()).as_deref(),
            Some("lo")
        );
        let allowed = crate::data::pin::allowed_cpus();
        let host = read_host(Path::new("/"), &allowed, Some("lo"));
        assert_eq!(host.interface, Some(("lo".to_string(), None)));
        assert_eq!(crate::data::pin::place(2, &host), None);
        let ids: Vec<usize> = host.cpus.iter().map(|c| c.id).collect();
        assert_eq!(ids, allowed);
        // Each NIC of this host: a plan on allowed cores only (printed with --nocapture).
        let nics = std::fs::read_dir("/sys/class/net")
            .into_iter()
            .flatten()
            .flatten();
        for name in nics.filter_map(|e| e.file_name().into_string().ok()) {
            let host = read_host(Path::new("/"), &allowed, Some(&name));
            if let Some(p) = crate::data::pin::place(4, &host) {
                assert!(
                    p.plan.0.iter().flatten().all(|c| allowed.contains(c)),
                    "{p:?}"
                );
                eprintln!("{name}: {}", p.why);
            }
        }
    }
}
