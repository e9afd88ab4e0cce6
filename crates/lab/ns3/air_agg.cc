// airpack-ns3-air: the stations' uplink aggregation in pure simulation
// (issue 14 point 9; `airpack lab cell-sim --uplink-agg`). In voice mode a
// flow packet that a node other than the access point sends over the air to
// the access point as its flow's first hop is put in that node's bundle
// instead, as airpack's hop-by-hop aggregation role on a station does it
// (crates/core's engine with `hold_time_us` = HOLD, `max_packets` = K, link
// mode `fixed`, the lab's `station_uplink_agg`): the bundle leaves when it
// holds K packets (or as many as the node has flows to the access point, if
// fewer: the daemon's `max_packets` is its station's calls) or when its
// first packet has waited HOLD; a bundle of one
// packet leaves as that packet, unchanged. With `agg_up_busy` the hold is
// the daemon's `link_mode = "hold-while-busy"` with the node's own radio as
// the busy signal: a packet leaves at once while the node's MAC queues are
// empty (nothing waiting, nothing in flight), else it waits in the bundle,
// which leaves when those queues empty (its frame's predecessor acked or
// dropped), when full, or after HOLD; so a bundle holds only what would
// have waited for the medium anyway. A bundle of j >= 2 packets is one
// unicast frame of B_j bytes to the access point (given by the lab: the
// native encoding behind an IPv4 header, so the model invents no byte
// count), which splits it at once and relays each packet on its path, as
// the daemon re-injects them.
//
// Directive (air.cc's list):
//   agg_up AP HOLD_US B2 .. BK   nodes other than AP bundle their packets to
//                                AP: up to K packets, B_j bytes for j of them
//   agg_up_busy                  ... and hold only while the node's radio is busy
//
// Counters: the report's "agg_up" (null without the directive).
//
// Must not touch: the AP's multiplexer (air_cell.cc), the relaying (air_io.cc
// hands first hops to AggTake and bundles to AggSplit, and each acked or
// dropped MPDU of a node to AggTxDone).

#include "air.h"

#include <algorithm>
#include <sstream>

namespace air
{

namespace
{

// A bundle's first 8 bytes (where a flow packet has its flow index and
// sequence number): AGG_MARK (air.h), then the packet count; then per packet
// its flow index and sequence number (4 + 4 bytes, big-endian).

struct AggCfg
{
    bool on = false;
    bool busy = false; // agg_up_busy
    uint32_t ap = 0;
    uint64_t hold_us = 20000;
    std::vector<uint32_t> bytes; // bytes[j] = B_j (j >= 2); size K + 1
} g_agg;

struct AggQueue
{
    std::vector<std::pair<uint32_t, uint32_t>> held; // (flow, seq)
    uint64_t gen = 0;                                // bundles opened so far
    uint32_t max = 0; // packets per bundle: K, or the node's flows to the AP if fewer
};

std::vector<AggQueue> g_q; // per node

struct AggCounters
{
    uint64_t bundles = 0, bundled = 0, closed_full = 0, closed_hold = 0, closed_idle = 0,
             alone = 0, split = 0;
} g_aggc;

void Send(uint32_t i)
{
    AggQueue& q = g_q[i];
    const size_t j = q.held.size();
    q.gen++; // a pending hold timer of this bundle does nothing
    if (j == 0)
    {
        return;
    }
    Ptr<Packet> p;
    if (j == 1)
    {
        g_aggc.alone++;
        p = VoicePacket(q.held[0].first, q.held[0].second);
    }
    else
    {
        g_aggc.bundles++;
        g_aggc.bundled += j;
        std::vector<uint8_t> b(g_agg.bytes[j], 0);
        PutU32(&b[0], AGG_MARK);
        PutU32(&b[4], uint32_t(j));
        for (size_t x = 0; x < j; x++)
        {
            PutU32(&b[8 + 8 * x], q.held[x].first);
            PutU32(&b[12 + 8 * x], q.held[x].second);
        }
        p = Create<Packet>(b.data(), b.size());
    }
    q.held.clear();
    SendWifiFrom(i, p, g_air_mac[g_agg.ap], 0x0800);
}

// Nothing of node i's waits or flies in its MAC queues.
bool RadioIdle(uint32_t i)
{
    for (auto& q : Queues(i))
    {
        if (q->GetNPackets() > 0)
        {
            return false;
        }
    }
    return true;
}

// agg_up_busy: node i's radio may have emptied (run after the MAC's own
// handling of the acked or dropped MPDU, which leaves the queue then).
void ReleaseIfIdle(uint32_t i)
{
    if (!g_q[i].held.empty() && RadioIdle(i))
    {
        g_aggc.closed_idle++;
        Send(i);
    }
}

void HoldExpired(uint32_t i, uint64_t gen)
{
    if (g_q[i].gen == gen && !g_q[i].held.empty())
    {
        g_aggc.closed_hold++;
        Send(i);
    }
}

} // namespace

bool AggDirective(const std::string& k, std::istringstream& s)
{
    if (k == "agg_up_busy")
    {
        g_agg.busy = true;
        std::string rest;
        return !(s >> rest); // no arguments
    }
    if (k != "agg_up")
    {
        return false;
    }
    g_agg.on = true;
    g_agg.bytes = {0, 0};
    if (!(s >> g_agg.ap >> g_agg.hold_us) || g_agg.hold_us == 0)
    {
        return false;
    }
    uint32_t b;
    while (s >> b)
    {
        const uint32_t j = g_agg.bytes.size();
        if (b < 8 + 8 * j)
        {
            return false; // no room for the bundle's own index
        }
        g_agg.bytes.push_back(b);
    }
    return g_agg.bytes.size() >= 3;
}

bool AggCheck(uint32_t n)
{
    if (!g_agg.on)
    {
        return !g_agg.busy;
    }
    g_q.assign(n, AggQueue());
    // as the lab's station daemon: `max_packets` = the station's calls
    const uint32_t k = g_agg.bytes.size() - 1;
    for (const auto& f : g_flows)
    {
        if (f.from < n && f.path.size() > 1 && f.path[1] == g_agg.ap && f.from != g_agg.ap)
        {
            g_q[f.from].max = std::min(k, g_q[f.from].max + 1);
        }
    }
    return g_voice && g_agg.ap < n;
}

bool AggTake(uint32_t i, uint32_t flow, uint32_t seq, uint32_t next)
{
    if (!g_agg.on || i == g_agg.ap || next != g_agg.ap)
    {
        return false;
    }
    AggQueue& q = g_q[i];
    q.held.emplace_back(flow, seq);
    if (q.held.size() == 1)
    {
        Simulator::Schedule(MicroSeconds(g_agg.hold_us), &HoldExpired, i, q.gen);
    }
    if (q.held.size() >= q.max)
    {
        g_aggc.closed_full++;
        Send(i);
    }
    else if (g_agg.busy && q.held.size() == 1 && RadioIdle(i))
    {
        Send(i); // an idle radio: nothing to wait for
    }
    return true;
}

void AggTxDone(uint32_t i)
{
    if (g_agg.busy && i < g_q.size() && !g_q[i].held.empty())
    {
        Simulator::ScheduleNow(&ReleaseIfIdle, i);
    }
}

bool AggSplit(Ptr<const Packet> p, std::vector<std::pair<uint32_t, uint32_t>>& out)
{
    out.clear();
    const uint32_t n = p->GetSize();
    if (!g_agg.on || n < 8)
    {
        return false;
    }
    std::vector<uint8_t> b(n);
    p->CopyData(b.data(), n);
    if (GetU32(b.data()) != AGG_MARK)
    {
        return false;
    }
    const uint32_t j = GetU32(b.data() + 4);
    if (j < 2 || 8 + uint64_t(8) * j > n)
    {
        return true; // a bundle, but not one of ours: nothing to relay
    }
    g_aggc.split++;
    for (uint32_t x = 0; x < j; x++)
    {
        out.emplace_back(GetU32(b.data() + 8 + 8 * x), GetU32(b.data() + 12 + 8 * x));
    }
    return true;
}

std::string AggJson()
{
    if (!g_agg.on)
    {
        return "null";
    }
    std::ostringstream o;
    o << "{\"k\":" << g_agg.bytes.size() - 1 << ",\"hold_us\":" << g_agg.hold_us
      << ",\"busy\":" << (g_agg.busy ? "true" : "false")
      << ",\"bundles\":" << g_aggc.bundles << ",\"bundled\":" << g_aggc.bundled
      << ",\"closed_full\":" << g_aggc.closed_full << ",\"closed_hold\":" << g_aggc.closed_hold
      << ",\"closed_idle\":" << g_aggc.closed_idle
      << ",\"alone\":" << g_aggc.alone << ",\"split\":" << g_aggc.split << "}";
    return o.str();
}

} // namespace air
