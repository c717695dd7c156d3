fn main() {
    let url = std::env::var("REDIS_URL").unwrap();
    let kind = std::env::args().nth(1).unwrap();
    let n: u64 = std::env::args().nth(2).unwrap().parse().unwrap();
    let client = leasehold::LockClient::new(&url).unwrap();
    let sem = client.semaphore("zz");
    sem.set_permits(1).unwrap();
    let t = std::time::Instant::now();
    for _ in 0..n {
        if kind == "sem" {
            sem.acquire().unwrap().unlock().unwrap();
        } else {
            client.lock("zzl").unwrap().unlock().unwrap();
        }
    }
    println!(
        "{kind}: {:.0} pairs/s",
        n as f64 / t.elapsed().as_secs_f64()
    );
}
