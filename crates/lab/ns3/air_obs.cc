// airpack-ns3-air: what the program tells the outside while it runs and at
// exit. A probe every millisecond of simulated time samples how far the
// real-time scheduler runs behind the wall clock (histogram for p50/p99),
// stops the simulation on SIGTERM, rewrites the lab's stats file (JSON,
// every 200 ms) and the per-node observability files `DIR/NODE.air` (text,
// format in docs/lab.md section 2b, every OBS_MS), each atomically by
// rename. At exit: the JSON report on stdout.
//
// Must not touch: the scenario or the taps (air.cc, air_io.cc).

#include "air.h"

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <sys/resource.h>
#include <thread>
#include <time.h>

namespace air
{

namespace
{

// real-time lag histogram: 10 µs bins up to 1 s
const int LAG_BIN_US = 10;
std::vector<uint64_t> g_lag(100001, 0);
double g_lag_max_us = 0;
uint64_t g_lag_n = 0;
std::string g_obs_dir;
uint32_t g_obs_ms = 0;
bool g_started = false; // stats file written once (the lab waits for it)

// per transmitting peer with a bit error rate: frames drawn for, lost
std::string BerJson(const Counters& c)
{
    std::ostringstream o;
    bool first = true;
    for (auto& [j, p] : c.peers)
    {
        if (p.ber_checked == 0)
        {
            continue;
        }
        o << (first ? "" : ",") << "\"" << g_nodes[j].name << "\":{\"frames\":" << p.ber_checked
          << ",\"lost\":" << p.ber_lost << "}";
        first = false;
    }
    return o.str();
}

std::string CountersJson(uint32_t i)
{
    Counters& c = g_cnt[i];
    std::ostringstream o;
    o << "{\"name\":\"" << g_nodes[i].name << "\",\"from_tap\":" << c.from_tap
      << ",\"mac_tx\":" << c.mac_tx << ",\"mac_rx\":" << c.mac_rx << ",\"to_tap\":" << c.to_tap
      << ",\"phy_tx\":" << c.phy_tx << ",\"drop_queue\":" << c.drop_queue
      << ",\"drop_retry\":" << c.drop_retry << ",\"drop_expired\":" << c.drop_expired
      << ",\"drop_other\":" << c.drop_other << ",\"retries\":" << c.retries
      << ",\"ber_lost\":" << c.ber_lost << ",\"ber_from\":{" << BerJson(c)
      << "}"
      << ",\"tx_us\":" << c.tx_ns / 1000 << ",\"rx_us\":" << c.rx_ns / 1000
      << ",\"cca_us\":" << c.cca_ns / 1000 << "}";
    return o.str();
}

std::string WiredJson()
{
    std::ostringstream o;
    for (uint32_t k = 0; k < g_wired.size(); k++)
    {
        const WiredCfg& w = g_wired[k];
        o << (k ? "," : "") << "{\"a\":\"" << g_nodes[w.a].name << "\",\"b\":\""
          << g_nodes[w.b].name << "\",\"from_tap\":[" << w.from_tap[0] << "," << w.from_tap[1]
          << "],\"to_tap\":[" << w.to_tap[0] << "," << w.to_tap[1] << "],\"drop_queue\":["
          << w.drop[0] << "," << w.drop[1] << "],\"drop_not_ip\":" << w.dropped_proto << "}";
    }
    return o.str();
}

void WriteAtomically(const std::string& path, const std::string& text)
{
    std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp);
        f << text;
    }
    std::rename(tmp.c_str(), path.c_str());
}

// Files are written by a thread of their own: a write or rename that
// blocks (a loaded disk; ext4 flushes data on rename-over) must not stall
// the real-time scheduler. The simulation thread only formats the text and
// leaves the newest version of each file here.
std::mutex g_io_mu;
std::condition_variable g_io_cv;
std::map<std::string, std::string> g_io_pending;
bool g_io_quit = false;
double g_io_max_s = 0; // longest batch of writes (diagnostics, in the report)
std::thread g_io;

void IoLoop()
{
    std::unique_lock<std::mutex> lk(g_io_mu);
    while (true)
    {
        g_io_cv.wait(lk, [] { return g_io_quit || !g_io_pending.empty(); });
        if (g_io_pending.empty() && g_io_quit)
        {
            return;
        }
        std::map<std::string, std::string> batch;
        batch.swap(g_io_pending);
        lk.unlock();
        double t0 = WallSeconds();
        for (auto& [path, text] : batch)
        {
            WriteAtomically(path, text);
        }
        double dt = WallSeconds() - t0;
        lk.lock();
        g_io_max_s = std::max(g_io_max_s, dt);
    }
}

void Publish(const std::string& path, std::string text)
{
    {
        std::lock_guard<std::mutex> lk(g_io_mu);
        g_io_pending[path] = std::move(text);
    }
    g_io_cv.notify_one();
}

// One node's observability file (docs/lab.md, section 2b).
void WriteObs(uint32_t i)
{
    Counters& c = g_cnt[i];
    uint64_t qp = 0, qb = 0;
    for (auto& q : Queues(i))
    {
        qp += q->GetNPackets();
        qb += q->GetNBytes();
    }
    int64_t now_us = Simulator::Now().GetMicroSeconds();
    std::ostringstream o;
    o << "airpack-air 1\n"
      << "node " << g_nodes[i].name << "\nmac " << g_lab_mac[i] << "\ntime_us " << now_us
      << "\nactive_us " << now_us << "\nbusy_us " << (c.tx_ns + c.rx_ns + c.cca_ns) / 1000
      << "\ntx_us " << c.tx_ns / 1000 << "\nrx_us " << c.rx_ns / 1000 << "\nqueue_packets "
      << qp << "\nqueue_bytes " << qb << "\ntx_msdus " << c.mac_tx << "\nretries " << c.retries
      << "\ntx_failed " << c.drop_retry << "\nqueue_drops " << c.drop_queue << "\n";
    for (auto& [j, p] : c.peers)
    {
        char sig[64];
        std::snprintf(sig, sizeof sig, "%.1f signal_avg_dbm %.1f", p.signal_dbm, p.signal_avg_dbm);
        o << "peer " << g_lab_mac[j] << " " << g_nodes[j].name << " signal_dbm " << sig
          << " rx_frames " << p.rx_frames << " tx_acked " << p.tx_acked << " tx_retries "
          << p.tx_retries << " tx_failed " << p.tx_failed << "\n";
    }
    Publish(g_obs_dir + "/" + g_nodes[i].name + ".air", o.str());
}

bool Ready()
{
    return g_associated >= g_stations;
}

// Every millisecond: sample the real-time lag, stop on SIGTERM, and now and
// then rewrite the stats and observability files.
void Probe(Ptr<RealtimeSimulatorImpl> rt, uint64_t tick)
{
    if (rt)
    {
        double lag_us = (rt->RealtimeNow() - Simulator::Now()).GetMicroSeconds();
        lag_us = std::max(lag_us, 0.0);
        g_lag_max_us = std::max(g_lag_max_us, lag_us);
        g_lag[std::min<size_t>(size_t(lag_us / LAG_BIN_US), g_lag.size() - 1)]++;
        g_lag_n++;
    }
    // the files appear once every station is associated (infrastructure)
    if (!g_stats.empty() && Ready() && (tick % 200 == 0 || !g_started))
    {
        WriteStats();
    }
    if (!g_obs_dir.empty() && Ready() && tick % g_obs_ms == 0)
    {
        for (uint32_t i = 0; i < g_nodes.size(); i++)
        {
            WriteObs(i);
        }
    }
    if (g_stop)
    {
        Simulator::Stop();
        return;
    }
    Simulator::Schedule(MilliSeconds(1), &Probe, rt, tick + 1);
}

double LagQuantileUs(double q)
{
    if (g_lag_n == 0)
    {
        return 0;
    }
    uint64_t want = uint64_t(q * g_lag_n), acc = 0;
    for (size_t b = 0; b < g_lag.size(); b++)
    {
        acc += g_lag[b];
        if (acc > want)
        {
            return double((b + 1) * LAG_BIN_US);
        }
    }
    return g_lag_max_us;
}

} // namespace

double CpuSeconds()
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

double WallSeconds()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

void WriteStats()
{
    std::ostringstream o;
    o << "{\"sim_s\":" << Simulator::Now().GetSeconds() << ",\"associated\":" << g_associated
      << ",\"nodes\":[";
    for (uint32_t i = 0; i < g_nodes.size(); i++)
    {
        o << (i ? "," : "") << CountersJson(i);
    }
    o << "],\"wired\":[" << WiredJson() << "]}\n";
    Publish(g_stats, o.str());
    g_started = true;
}

void StartProbe(bool realtime, const std::string& obs_dir, uint32_t obs_ms)
{
    g_obs_dir = obs_dir;
    g_obs_ms = std::max<uint32_t>(obs_ms, 1);
    Ptr<RealtimeSimulatorImpl> rt;
    if (realtime)
    {
        rt = DynamicCast<RealtimeSimulatorImpl>(Simulator::GetImplementation());
        if (!rt)
        {
            std::fprintf(stderr, "airpack-ns3-air: real-time scheduler not active\n");
            std::exit(2);
        }
    }
    Simulator::Schedule(Seconds(0), &Probe, rt, uint64_t(0));
    g_io = std::thread(IoLoop);
}

void FlushFiles()
{
    {
        std::lock_guard<std::mutex> lk(g_io_mu);
        g_io_quit = true;
    }
    g_io_cv.notify_one();
    if (g_io.joinable())
    {
        g_io.join();
    }
}

std::string Report(const std::string& phy, bool tap, double sim, double wall, double cpu,
                   uint64_t events)
{
    std::ostringstream o;
    o << "{\"mode\":\"" << (tap ? "tap" : "sim") << "\",\"phy\":\"" << phy
      << "\",\"sim_s\":" << sim << ",\"wall_s\":" << wall << ",\"cpu_s\":" << cpu
      << ",\"cpu_pct\":" << (wall > 0 ? 100 * cpu / wall : 0) << ",\"events\":" << events
      << ",\"events_per_s\":" << (wall > 0 ? events / wall : 0)
      << ",\"lag_samples\":" << g_lag_n << ",\"lag_max_ms\":" << g_lag_max_us / 1000
      << ",\"lag_p99_ms\":" << LagQuantileUs(0.99) / 1000
      << ",\"lag_p50_ms\":" << LagQuantileUs(0.5) / 1000 << ",\"io_max_ms\":" << g_io_max_s * 1000
      << ",\"associated\":" << g_associated << ",\"assoc_events\":" << g_assoc_events
      << ",\"last_assoc_us\":" << g_last_assoc_us << ",\"ap_edca\":" << EdcaJson() << ",\"agg_up\":" << AggJson()
      << ",\"nodes\":[";
    for (uint32_t i = 0; i < g_nodes.size(); i++)
    {
        o << (i ? "," : "") << CountersJson(i);
    }
    o << "],\"wired\":[" << WiredJson() << "],\"flows\":[";
    for (uint32_t k = 0; k < g_flows.size(); k++)
    {
        const FlowCfg& f = g_flows[k];
        double fps = (f.received > 1 && f.last > f.first) ? (f.received - 1) / (f.last - f.first) : 0;
        o << (k ? "," : "") << "{\"from\":" << f.from << ",\"to\":" << f.to << ",\"sent\":" << f.sent
          << ",\"received\":" << f.received << ",\"fps\":" << fps << "}";
    }
    o << "]}";
    return o.str();
}

} // namespace air
