//! A plain TCP relay: the benchmark anchor for "what does one more hop cost on this machine".
//!
//! It accepts connections on LISTEN and copies bytes both ways to TARGET, nothing else: no framing,
//! no rewriting, no policy. Whatever a client sees added through it is the cost of the extra TCP hop
//! and of a userspace process on the same cores, the floor under any Kafka proxy's added latency.
//! For a broker to be reached only through it, the broker must advertise LISTEN
//! (`benches/proxy/relay_bench.py` starts one that does). Not a product binary.
//!
//! `relay LISTEN TARGET` (both HOST:PORT)

use tokio::net::{TcpListener, TcpStream};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(target)) = (args.next(), args.next()) else {
        return Err(std::io::Error::other("usage: relay LISTEN TARGET"));
    };
    let listener = TcpListener::bind(&listen).await?;
    loop {
        let (mut client, _) = listener.accept().await?;
        let target = target.clone();
        tokio::spawn(async move {
            let Ok(mut broker) = TcpStream::connect(&target).await else { return };
            // As the proxy does on both sides: no Nagle delay on small requests.
            let _ = (client.set_nodelay(true), broker.set_nodelay(true));
            let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
        });
    }
}
