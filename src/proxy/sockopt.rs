//! The TCP options the proxy sets on its connections, both to clients and to brokers: no Nagle
//! delay, and the congestion control algorithm `proxy.tcp_congestion_control` names.
//!
//! Why the algorithm is settable: a proxy sends every byte a second time, so the cost of each sent
//! packet counts twice. With BBR and a queueing discipline that does not pace (anything but `fq`, and
//! always on loopback), Linux paces every socket itself with a high-resolution timer per burst. In a
//! virtual machine, arming that timer traps to the hypervisor: in a profile of the proxy while a
//! consumer read through it, a sixth of the samples were under `tcp_write_xmit`. With `cubic` on the
//! proxy's sockets (the broker and the client kept the system's `bbr`), the proxy's CPU per MB
//! consumed fell from about 0.38 to 0.22 ms (BENCHMARKS.md, "TCP congestion control"). A loss-based
//! algorithm (`cubic`, `reno`) does not pace. Which is right depends on the network between the
//! proxy and its peers, so the system's default stays unless the operator names one.
//!
//! Must not touch: anything but socket options.

use tokio::net::TcpStream;

/// Sets the options on a newly connected or accepted socket. Failures are ignored: the algorithm was
/// checked when the configuration loaded (by [`check_congestion`]), and a socket that refuses an
/// option still works.
pub(crate) fn tune(socket: &TcpStream, congestion: Option<&str>) {
    let _ = socket.set_nodelay(true);
    if let Some(name) = congestion {
        let _ = set_on(&socket2::SockRef::from(socket), name);
    }
}

/// Whether this process may use the algorithm `name`, tried on a socket of its own: `ENOENT` for
/// one the system does not have (or cannot load), `EPERM` for one it does not allow to
/// unprivileged processes.
pub(crate) fn check_congestion(name: &str) -> std::io::Result<()> {
    let socket = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    set_on(&socket2::SockRef::from(&socket), name)
}

/// The algorithms the system has and the ones it allows to unprivileged processes, as the two
/// `sysctl` values say (empty where it cannot be read), for error messages.
pub(crate) fn congestion_choices() -> (String, String) {
    let read = |name: &str| std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}")).map(|s| s.trim().to_owned()).unwrap_or_default();
    (read("tcp_available_congestion_control"), read("tcp_allowed_congestion_control"))
}

#[cfg(any(target_os = "linux", target_os = "freebsd"))]
fn set_on(socket: &socket2::SockRef<'_>, name: &str) -> std::io::Result<()> {
    socket.set_tcp_congestion(name.as_bytes())
}

#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
fn set_on(_socket: &socket2::SockRef<'_>, _name: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "TCP_CONGESTION exists on Linux and FreeBSD only"))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The algorithm the system gives new sockets.
    fn system_default() -> String {
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").expect("sysctl").trim().to_owned()
    }

    #[tokio::test]
    async fn tune_sets_the_named_algorithm_on_that_socket_only() {
        // `reno` is built into every Linux kernel and always allowed; on a system whose default is
        // reno, cubic (root, as in CI, or the allowed list).
        let system = system_default();
        let other = if system == "reno" { "cubic" } else { "reno" };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let name_of = |s: &TcpStream| {
            let name = socket2::SockRef::from(s).tcp_congestion().expect("get");
            String::from_utf8(name).expect("utf-8").trim_end_matches('\0').to_owned()
        };
        tune(&client, Some(other));
        tune(&server, None);
        assert_eq!(name_of(&client), other);
        assert_eq!(name_of(&server), system);
        assert!(client.nodelay().expect("nodelay") && server.nodelay().expect("nodelay"));
    }

    #[test]
    fn check_refuses_an_algorithm_the_system_does_not_have() {
        let err = check_congestion("no-such-algo").expect_err("refused");
        assert_eq!(err.raw_os_error(), Some(nix::libc::ENOENT), "{err}");
        check_congestion("reno").expect("reno is always there");
        let (available, allowed) = congestion_choices();
        assert!(available.split(' ').any(|a| a == "reno"), "{available}");
        assert!(!allowed.is_empty());
    }
}
