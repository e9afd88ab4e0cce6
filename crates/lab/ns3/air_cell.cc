// airpack-ns3-air: the access point's downlink multiplexer in pure
// simulation (issue 14; `airpack lab cell-sim`). In voice mode, a flow
// packet the access point would relay to a station as a unicast frame is
// handed to this model instead: airpack's AP mux as crates/core's
// downlink::mux does it (compact layout), reduced to sizes and times. A
// frame opens with its first packet and closes when that packet has waited
// the interval, or when the next entry would not fit the frame limit (that
// entry starts the next frame); as it closes, the entries of up to DEPTH
// previous frames are put in front of its own while they fit (redundancy);
// it leaves at once as one group-addressed frame of UDP/IP + frame bytes
// from the AP (ns-3's non-unicast rate, no ACK, no retry). Entry sizes are
// given per stream packet by the lab (`mux_entry`, taken from the real
// mux's output), so the model invents no byte count. A station that
// receives a frame takes the entries of its own flows (own block first,
// then the repeated blocks); others are ignored.
//
// Loss rule (`mux_loss`, crates/core's downlink::loss): each station counts
// the frame indices it receives and the gaps between them (with repeats: a
// missing frame whose block arrived later counts as recovered); every
// PERIOD the AP takes each station's window as its report (instantly: the
// report's own airtime, one small frame per second per station, is not
// modelled), smooths it (sums of expected and lost frames times KEEP, plus
// the window), and serves a station above LIMIT (with MIN_FRAMES of
// evidence) by unicast until it falls below CLEAR: MuxTake then declines
// its packets, which the AP relays as ordinary unicast frames. A station
// that received nothing while at least MIN_FRAMES were sent is charged all
// of them. Airtime guard (as the core's): each station's downlink packets
// in the window are priced at UNICAST_US each, the frames at MC_FIXED_US +
// MC_US_PER_BYTE per IP byte; load = uplink (= all stations' downlink
// priced as unicast) + unicast stations' downlink + frames, per second; a
// station moves only if load + its downlink <= BUDGET, and a unicast
// station returns when load > BUDGET. The probe timer is not modelled (a point lasts seconds; a
// station on unicast keeps measuring the others' frames).
// New stations (START = 1, the core's `LossControl::admit`): at its first downlink packet a
// station's price is set to a prior (its downlink flows x one packet per INTERVAL x UNICAST_US;
// the core charges a 60-byte packet instead); CHECK_US later its price is measured (its packets
// since) and it moves to unicast if the whole cell would fit on unicast (sum of 2 x every
// station's price <= BUDGET; else it stays in the frame); when that sum passes BUDGET every new
// station on unicast returns to the frame; it joins the frame at a report with MIN_FRAMES of evidence and loss below CLEAR (above
// LIMIT it stays as any lossy station); every CHECK_US its price is re-measured (its packets since
// the last check) and the shedding re-applied. Short first probe (TRIAL_US > 0, the core's
// trial): a new station on unicast with less than MIN_FRAMES of evidence TRIAL_US after its start
// goes on a trial: its packets go both in the frame and by unicast (the first copy to arrive
// counts), so frames are sent it can measure; the trial ends at its first report with evidence
// (below CLEAR it joins, else it stays on unicast). The trial starts only if the start guard's
// sum plus the trial frames (one per INTERVAL, MC_FIXED_US + MC_US_PER_BYTE x (UDP_IP + HEADER
// + 60 bytes per flow of the stations on trial)) fits BUDGET, else the new stations return to
// the frame. The core's end of a trial without reports is not modelled (every station reports).
//
// Airtime rule (`mux_rule`, crates/core's `Mux::close`): as a frame of k own
// entries closes it is sent C_k times (C_k <= N of `mux_copies`), or, with
// C_k = 0, not at all: its packets leave the AP as the unicast frames they
// came as (each flow packet rebuilt: its bytes, flow index and sequence
// number), at the close, and the frame's index goes to the next frame (the
// stations see no gap); each of those streams starts over at its first entry
// size (the core restarts its RTP context: full entries). The table is the lab's, computed by driving the real
// mux with the cell's rates; a frame holding a trial entry (loss rule) is
// never sent as unicast, as in the core. Repeated blocks are not priced.
//
// Not modelled (docs/lab.md, section 5, "Pure simulation of the cell"):
// the idle release of a lone packet, the airtime rule without `mux_rule`,
// partial repeats, the demultiplexer's loss of RTP context after lost
// frames (`no_context`).
//
// Directives (air.cc's list):
//   mux_ap INTERVAL_US MAX_FRAME HEADER REPEAT_LEN UDP_IP DEPTH
//   mux_entry PERIOD S0 S1 .. Sm   entry k of a stream is Sk; beyond Sm the
//                                  last PERIOD sizes repeat
//   mux_report PATH                 the model's counters as JSON at exit
//   mux_copies N                    every frame is sent N times (1-4), each copy
//                                  its own MPDU and channel access; a station
//                                  takes the first copy it gets, ignores the rest
//   mux_loss LIMIT CLEAR KEEP MIN_FRAMES PERIOD_US BUDGET UNICAST_US MC_FIXED_US MC_US_PER_BYTE
//            START CHECK_US TRIAL_US  the loss rule (fractions; airtime guard; new stations)
//   mux_rule C1 C2 .. Cn           the airtime rule: a frame of k own entries is
//                                  sent Ck times (0-4; 0 = its packets as unicast;
//                                  beyond n entries Cn)
//   mux_guard BYTES                 before each frame (its first copy) a guard: an
//                                  IP packet of BYTES bytes (>= 28: IPv4 + UDP, no
//                                  payload) to the group, which no station takes. It
//                                  is what collides when the AP's access meets a
//                                  station's in the same slot (immediate access on an
//                                  idle medium); the frame then follows a busy medium,
//                                  at the AP's AIFS + backoff (docs/results.md)
//
// Must not touch: the scenario (air.cc), the relaying of voice mode
// (air_io.cc calls MuxTake and MuxFrameReceived).

#include "air.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace air
{

namespace
{

struct MuxEntry
{
    uint32_t flow, seq, bytes;
    uint32_t to = 0;    // the station (next hop from the AP)
    bool trial = false; // also relayed by unicast (loss rule's trial)
};

struct MuxFrame
{
    std::vector<MuxEntry> own;
    uint32_t own_bytes = 0;  // entries only
    uint32_t blocks = 0;     // previous frames repeated in front (newest k)
    uint32_t len = 0;        // frame bytes (UDP payload)
};

struct MuxCfg
{
    bool on = false;
    uint32_t ap = 0;
    uint64_t interval_us = 20000;
    uint32_t max_frame = 1440, header = 4, repeat_len = 2, udp_ip = 28, depth = 0;
    uint32_t period = 0;
    std::vector<uint32_t> sizes;
    std::string report;
    bool loss = false;
    double limit = 0.01, clear = 0.005, keep = 0.5;
    uint32_t min_frames = 20;
    uint64_t period_us = 1000000;
    double budget = 1.0, unicast_us = 0, mc_fixed_us = 0, mc_us_per_byte = 0;
    uint32_t start = 0;
    uint64_t check_us = 200000;
    uint64_t trial_us = 0;
    uint32_t copies = 1;
    std::vector<uint32_t> rule; // copies per own entry count (`mux_rule`), empty = N
    uint32_t guard = 0;         // guard packet bytes before each frame (`mux_guard`), 0 = none
} g_mux;
uint64_t g_guards = 0; // guard packets sent

// Loss rule, per node (a station: a node MuxTake was asked to reach).
struct LossSta
{
    bool station = false, unicast = false;
    int64_t last = -1;              // last frame index received
    uint64_t rx = 0, miss = 0, rec = 0; // this window
    uint64_t pkts = 0;                  // downlink packets offered, this window
    double air_rate = 0;                // their unicast price, µs per s
    double expected = 0, lost = 0;  // smoothed
    int64_t mark = -1;              // frames sent at the previous report
    bool fresh = false;             // started on unicast, no clean report yet
    bool pending = false;           // start decided at its first check
    uint64_t chk_pkts = 0;          // downlink packets since the last price check
    int64_t chk_t0 = 0;             // its time, ns
    bool trial = false;             // its packets in the frame and by unicast
    int64_t trial_at = 0;           // when its trial starts if still unmeasured, ns
    uint32_t flows = 0;             // downlink flows to it
};
std::vector<LossSta> g_loss;
uint64_t g_to_unicast = 0, g_to_multicast = 0, g_loss_unicast = 0, g_blackouts = 0;
uint64_t g_held = 0, g_shed = 0, g_start_unicast = 0, g_start_held = 0, g_start_cleared = 0;
uint64_t g_trials = 0, g_trial_pkts = 0;
size_t g_frames_mark = 0; // frames sent at the previous report time
double g_frames_rate = 0; // the frames' price at the last report, µs per s

// The start guard's load: every station on unicast (share of the channel).
double LossAllUnicast()
{
    double l = 0;
    for (const LossSta& st : g_loss)
    {
        l += 2 * st.air_rate;
    }
    return l / 1e6;
}

// The trial frames' price (share of the channel) for the stations `also` selects and those on trial.
template <typename F>
double LossTrialLoad(F also)
{
    uint32_t flows = 0;
    for (const LossSta& st : g_loss)
    {
        flows += (st.trial || also(st)) ? st.flows : 0;
    }
    if (flows == 0 || g_mux.trial_us == 0)
    {
        return 0;
    }
    const double bytes = g_mux.udp_ip + g_mux.header + 60.0 * flows;
    return (1e6 / g_mux.interval_us) * (g_mux.mc_fixed_us + g_mux.mc_us_per_byte * bytes) / 1e6;
}

// The start guard: the whole cell on unicast plus the new stations' trial frames.
double LossStartLoad(bool pending)
{
    return LossAllUnicast() +
           LossTrialLoad([pending](const LossSta& st) { return st.fresh || (pending && st.pending); });
}

// The guard's load (share of the channel) from the last measured prices.
double LossLoad()
{
    double l = g_frames_rate;
    for (const LossSta& st : g_loss)
    {
        l += st.air_rate + (st.unicast ? st.air_rate : 0);
    }
    return l / 1e6;
}

std::vector<MuxFrame> g_sent;       // every frame sent, by index
MuxFrame g_open;                    // the frame being filled
EventId g_close;                    // its interval deadline
std::vector<uint32_t> g_entries_of; // entries so far per flow
// per node: frames received, entries taken (own block / repeat), duplicates
std::vector<uint64_t> g_rx_frames, g_rx_own, g_rx_repeat, g_rx_dup;
// per node: extra copies of a frame already taken (mux_copies), last frame index taken
std::vector<uint64_t> g_rx_copies;
std::vector<int64_t> g_rx_last;
// per node: the longest run of frames missed in a row, and the time (µs) of the frame after it
std::vector<uint64_t> g_rx_gap, g_rx_gap_at_us;
uint64_t g_closed_size = 0, g_closed_interval = 0, g_repeated = 0;
// airtime rule: frames sent as unicast, their packets, copies priced out
uint64_t g_rule_frames = 0, g_rule_packets = 0, g_rule_priced = 0;

const uint32_t kMagic = 0xA1C0FFEE;

uint32_t EntryBytes(uint32_t k)
{
    const auto& s = g_mux.sizes;
    if (k < s.size())
    {
        return s[k];
    }
    return s[s.size() - g_mux.period + (k - s.size()) % g_mux.period];
}

void Close(bool by_size)
{
    if (g_open.own.empty())
    {
        return;
    }
    Simulator::Cancel(g_close);
    (by_size ? g_closed_size : g_closed_interval)++;
    MuxFrame f = g_open;
    g_open = MuxFrame();
    f.len = g_mux.header + f.own_bytes;
    uint32_t copies = g_mux.copies;
    if (!g_mux.rule.empty())
    {
        const size_t k = std::min(f.own.size(), g_mux.rule.size());
        copies = std::min(g_mux.rule[k - 1], g_mux.copies);
        const bool trial = std::any_of(f.own.begin(), f.own.end(), [](const MuxEntry& e) {
            return e.trial;
        });
        if (copies == 0 && !trial)
        {
            // unicast: every packet as it came, the frame index kept for the next frame
            g_rule_frames++;
            for (const MuxEntry& e : f.own)
            {
                Ptr<Packet> p = VoicePacket(e.flow, e.seq);
                EdcaTag(g_mux.ap, p);
                SendWifiFrom(g_mux.ap, p, g_air_mac[e.to], 0x0800);
                g_rule_packets++;
                g_entries_of[e.flow] = 0; // its context starts over: full entries, as a new stream's
            }
            return;
        }
        copies = std::max(copies, 1u);
        g_rule_priced += g_mux.copies - copies;
    }
    // redundancy: blocks of frames seq-1 .. seq-k, newest first, while they fit
    uint32_t blocks_len = 0, count = f.own.size();
    for (uint32_t j = 0; j < g_mux.depth && j < g_sent.size(); j++)
    {
        const MuxFrame& prev = g_sent[g_sent.size() - 1 - j];
        uint32_t bl = blocks_len + g_mux.repeat_len + prev.own_bytes;
        uint32_t extra = bl + (j >= 1 ? 1 : 0);
        if (f.len + extra > g_mux.max_frame || count + prev.own.size() > 1024)
        {
            break;
        }
        f.blocks = j + 1;
        blocks_len = bl;
        count += prev.own.size();
    }
    if (f.blocks > 0)
    {
        f.len += blocks_len + (f.blocks >= 2 ? 1 : 0);
        for (uint32_t j = 0; j < f.blocks; j++)
        {
            g_repeated += g_sent[g_sent.size() - 1 - j].own.size();
        }
    }
    uint32_t index = g_sent.size();
    uint32_t bytes = g_mux.udp_ip + f.len;
    g_sent.push_back(std::move(f));
    std::vector<uint8_t> b(bytes, 0);
    PutU32(&b[0], kMagic);
    PutU32(&b[4], index);
    if (g_mux.guard > 0)
    {
        Ptr<Packet> guard = Create<Packet>(g_mux.guard); // zeros: no magic, ignored
        EdcaTag(g_mux.ap, guard);
        SendWifiFrom(g_mux.ap, guard, Mac48Address("01:00:5e:00:00:0a"), 0x0800);
        g_guards++;
    }
    for (uint32_t c = 0; c < copies; c++)
    {
        Ptr<Packet> frame = Create<Packet>(b.data(), bytes);
        EdcaTag(g_mux.ap, frame); // AC_VO with `ap_edca` (air_edca.cc)
        SendWifiFrom(g_mux.ap, frame, Mac48Address("01:00:5e:00:00:0a"), 0x0800);
    }
}

void Take(uint32_t i, const MuxFrame& f, bool repeat)
{
    for (const MuxEntry& e : f.own)
    {
        FlowCfg& fl = g_flows[e.flow];
        if (fl.to != i)
        {
            continue;
        }
        if (e.seq < fl.recv_ns.size() && fl.recv_ns[e.seq] < 0)
        {
            fl.recv_ns[e.seq] = Simulator::Now().GetNanoSeconds();
            fl.received++;
            (repeat ? g_rx_repeat : g_rx_own)[i]++;
        }
        else
        {
            g_rx_dup[i]++;
        }
    }
}

void LossReports()
{
    const double sent = double(g_sent.size());
    const double period_s = g_mux.period_us / 1e6;
    double frames_us = 0;
    for (size_t f = g_frames_mark; f < g_sent.size(); f++)
    {
        frames_us += g_mux.mc_fixed_us + g_mux.mc_us_per_byte * (g_mux.udp_ip + g_sent[f].len);
    }
    g_frames_mark = g_sent.size();
    g_frames_rate = frames_us / period_s;
    for (LossSta& st : g_loss)
    {
        st.air_rate = st.pkts * g_mux.unicast_us / period_s;
        st.pkts = 0;
    }
    auto load = LossLoad;
    for (LossSta& st : g_loss)
    {
        if (!st.station)
        {
            continue;
        }
        double exp = double(st.rx + st.miss), lost = double(st.miss - std::min(st.rec, st.miss));
        const int64_t mark = st.mark;
        st.mark = int64_t(sent);
        st.rx = st.miss = st.rec = 0;
        if (exp == 0)
        {
            if (mark < 0 || sent - double(mark) < g_mux.min_frames)
            {
                continue;
            }
            g_blackouts++;
            exp = lost = sent - double(mark);
        }
        st.expected = st.expected * g_mux.keep + exp;
        st.lost = st.lost * g_mux.keep + lost;
        const double l = load();
        if (st.unicast && l > g_mux.budget)
        {
            st.unicast = st.fresh = st.trial = false;
            g_shed++;
            continue;
        }
        if (st.expected < g_mux.min_frames)
        {
            continue;
        }
        const double loss = st.lost / st.expected;
        if (!st.unicast && loss > g_mux.limit && l + st.air_rate / 1e6 > g_mux.budget)
        {
            g_held++;
        }
        else if (!st.unicast && loss > g_mux.limit)
        {
            st.unicast = true;
            g_to_unicast++;
        }
        else if (st.unicast && loss < g_mux.clear)
        {
            st.unicast = st.trial = false;
            (st.fresh ? g_start_cleared : g_to_multicast)++;
            st.fresh = false;
        }
        else if (loss > g_mux.limit || st.trial)
        {
            st.fresh = st.trial = false; // a lossy new station stays, as any lossy station
        }
    }
    Simulator::Schedule(MicroSeconds(g_mux.period_us), &LossReports);
}

// Every new station on unicast returns to the frame when the whole cell would not fit on unicast.
void LossShedFresh()
{
    if (LossStartLoad(false) <= g_mux.budget)
    {
        return;
    }
    for (LossSta& st : g_loss)
    {
        if (st.fresh)
        {
            st.unicast = st.fresh = st.trial = false;
            g_shed++;
        }
    }
}

// New stations' price checks (every CHECK_US): re-measure, shed while load > BUDGET.
void LossStartChecks()
{
    const int64_t now = Simulator::Now().GetNanoSeconds();
    bool any = false;
    for (LossSta& st : g_loss)
    {
        if (st.fresh && now > st.chk_t0)
        {
            st.air_rate = st.chk_pkts * g_mux.unicast_us * 1e9 / double(now - st.chk_t0);
            st.chk_pkts = 0;
            st.chk_t0 = now;
            any = true;
        }
    }
    if (any)
    {
        LossShedFresh();
    }
    // Trials due: new stations on unicast still unmeasured.
    auto due = [now](const LossSta& st) {
        return st.fresh && !st.trial && g_mux.trial_us > 0 && now >= st.trial_at &&
               st.expected < g_mux.min_frames;
    };
    if (std::any_of(g_loss.begin(), g_loss.end(), due))
    {
        const bool fits = LossAllUnicast() + LossTrialLoad(due) <= g_mux.budget;
        for (LossSta& st : g_loss)
        {
            if (!due(st))
            {
                continue;
            }
            if (fits)
            {
                st.trial = true;
                g_trials++;
            }
            else
            {
                st.unicast = st.fresh = false;
                g_shed++;
            }
        }
    }
    Simulator::Schedule(MicroSeconds(g_mux.check_us), &LossStartChecks);
}

// A new station's first check: its price measured, its start decided.
void LossDecide(uint32_t node)
{
    LossSta& st = g_loss[node];
    const int64_t now = Simulator::Now().GetNanoSeconds();
    if (!st.pending || now <= st.chk_t0)
    {
        return;
    }
    const double rate = st.chk_pkts * g_mux.unicast_us * 1e9 / double(now - st.chk_t0);
    st.air_rate = rate > 0 ? rate : st.air_rate;
    st.chk_pkts = 0;
    st.chk_t0 = now;
    st.pending = false;
    LossShedFresh();
    if (st.unicast)
    {
        return; // moved by a report already
    }
    if (LossStartLoad(true) <= g_mux.budget)
    {
        st.unicast = st.fresh = true;
        st.trial_at = now + int64_t(g_mux.trial_us) * 1000;
        g_start_unicast++;
    }
    else
    {
        g_start_held++;
    }
}

// A station's first downlink packet (its lease, in the daemon).
void LossAdmit(LossSta& st)
{
    if (!g_mux.start)
    {
        return;
    }
    uint32_t flows = 0;
    const uint32_t node = uint32_t(&st - g_loss.data());
    for (const FlowCfg& fl : g_flows)
    {
        flows += fl.to == node ? 1 : 0;
    }
    st.flows = flows;
    st.air_rate = flows * (1e6 / g_mux.interval_us) * g_mux.unicast_us;
    st.chk_t0 = Simulator::Now().GetNanoSeconds();
    st.pending = true;
    LossShedFresh();
    Simulator::Schedule(MicroSeconds(g_mux.check_us), &LossDecide, node);
}

} // namespace

bool MuxDirective(const std::string& k, std::istringstream& s)
{
    if (k == "mux_ap")
    {
        g_mux.on = true;
        return bool(s >> g_mux.interval_us >> g_mux.max_frame >> g_mux.header >> g_mux.repeat_len >>
                    g_mux.udp_ip >> g_mux.depth) &&
               g_mux.interval_us > 0 && g_mux.max_frame > g_mux.header && g_mux.depth <= 4;
    }
    if (k == "mux_guard")
    {
        return bool(s >> g_mux.guard) && g_mux.guard >= 28 && g_mux.guard <= 1500;
    }
    if (k == "mux_copies")
    {
        return bool(s >> g_mux.copies) && g_mux.copies >= 1 && g_mux.copies <= 4;
    }
    if (k == "mux_entry")
    {
        uint32_t x;
        if (!(s >> g_mux.period))
        {
            return false;
        }
        g_mux.sizes.clear();
        while (s >> x)
        {
            g_mux.sizes.push_back(x);
        }
        return g_mux.period > 0 && g_mux.period <= g_mux.sizes.size();
    }
    if (k == "mux_rule")
    {
        uint32_t x;
        g_mux.rule.clear();
        while (s >> x)
        {
            g_mux.rule.push_back(x);
        }
        auto valid = [](uint32_t c) { return c <= 4; };
        return !g_mux.rule.empty() && std::all_of(g_mux.rule.begin(), g_mux.rule.end(), valid);
    }
    if (k == "mux_report")
    {
        return bool(s >> g_mux.report);
    }
    if (k == "mux_loss")
    {
        g_mux.loss = true;
        return bool(s >> g_mux.limit >> g_mux.clear >> g_mux.keep >> g_mux.min_frames >>
                    g_mux.period_us >> g_mux.budget >> g_mux.unicast_us >> g_mux.mc_fixed_us >>
                    g_mux.mc_us_per_byte >> g_mux.start >> g_mux.check_us >> g_mux.trial_us) &&
               g_mux.clear <= g_mux.limit && g_mux.keep >= 0 && g_mux.keep < 1 &&
               g_mux.period_us > 0 && g_mux.start <= 1 && g_mux.check_us > 0;
    }
    return false;
}

bool MuxCheck(uint32_t ap)
{
    g_mux.ap = ap;
    if (g_mux.on && g_mux.loss)
    {
        Simulator::Schedule(MicroSeconds(g_mux.period_us), &LossReports);
        if (g_mux.start)
        {
            Simulator::Schedule(MicroSeconds(g_mux.check_us), &LossStartChecks);
        }
    }
    return !g_mux.on || (!g_mux.sizes.empty() && g_voice);
}

bool MuxTake(uint32_t i, uint32_t k, uint32_t seq, uint32_t next)
{
    if (!g_mux.on || i != g_mux.ap || next == g_mux.ap)
    {
        return false;
    }
    if (g_entries_of.size() < g_flows.size())
    {
        g_entries_of.resize(g_flows.size(), 0);
    }
    bool dup = false;
    if (g_mux.loss)
    {
        if (g_loss.size() < g_nodes.size())
        {
            g_loss.resize(g_nodes.size());
        }
        if (!g_loss[next].station)
        {
            g_loss[next].station = true;
            LossAdmit(g_loss[next]);
        }
        g_loss[next].pkts++;
        g_loss[next].chk_pkts++;
        if (g_loss[next].unicast)
        {
            g_loss_unicast++;
            if (!g_loss[next].trial)
            {
                return false; // served by unicast (loss rule)
            }
            dup = true; // on trial: in the frame too
            g_trial_pkts++;
        }
    }
    uint32_t cost = EntryBytes(g_entries_of[k]++);
    if (g_mux.header + cost > g_mux.max_frame)
    {
        return false; // too large for any frame: unicast, as the mux does
    }
    if (!g_open.own.empty() && g_mux.header + g_open.own_bytes + cost > g_mux.max_frame)
    {
        Close(true);
    }
    if (g_open.own.empty())
    {
        g_close = Simulator::Schedule(MicroSeconds(g_mux.interval_us), &Close, false);
    }
    g_open.own.push_back({k, seq, cost, next, dup});
    g_open.own_bytes += cost;
    return !dup; // a trial's packet is relayed by unicast as well
}

void MuxFrameReceived(uint32_t i, Ptr<const Packet> p)
{
    uint8_t h[8];
    if (!g_mux.on || p->GetSize() < 8 || p->CopyData(h, 8) != 8)
    {
        return;
    }
    uint32_t magic = GetU32(h), index = GetU32(h + 4);
    if (magic != kMagic || index >= g_sent.size())
    {
        return;
    }
    if (g_rx_frames.size() < g_nodes.size())
    {
        for (auto* v :
             {&g_rx_frames, &g_rx_own, &g_rx_repeat, &g_rx_dup, &g_rx_copies, &g_rx_gap, &g_rx_gap_at_us})
        {
            v->resize(g_nodes.size(), 0);
        }
        g_rx_last.resize(g_nodes.size(), -1);
    }
    if (int64_t(index) <= g_rx_last[i])
    {
        g_rx_copies[i]++; // a copy of a frame already taken (mux_copies)
        return;
    }
    if (g_rx_last[i] >= 0 && uint64_t(index - g_rx_last[i] - 1) > g_rx_gap[i])
    {
        g_rx_gap[i] = index - g_rx_last[i] - 1;
        g_rx_gap_at_us[i] = Simulator::Now().GetMicroSeconds();
    }
    g_rx_last[i] = index;
    g_rx_frames[i]++;
    const MuxFrame& f = g_sent[index];
    if (g_mux.loss)
    {
        if (g_loss.size() < g_nodes.size())
        {
            g_loss.resize(g_nodes.size());
        }
        LossSta& st = g_loss[i];
        if (int64_t(index) > st.last)
        {
            if (st.last >= 0)
            {
                st.miss += index - st.last - 1;
                for (uint32_t j = 1; j <= f.blocks; j++)
                {
                    st.rec += int64_t(index - j) > st.last ? 1 : 0;
                }
            }
            st.last = index;
            st.rx++;
        }
    }
    Take(i, f, false);
    for (uint32_t j = 1; j <= f.blocks; j++)
    {
        Take(i, g_sent[index - j], true);
    }
}

void WriteMuxReport()
{
    if (!g_mux.on || g_mux.report.empty())
    {
        return;
    }
    uint64_t entries = 0, bytes = 0;
    for (const auto& f : g_sent)
    {
        entries += f.own.size();
        bytes += f.len;
    }
    std::ostringstream o;
    o << "{\"frames\":" << g_sent.size() << ",\"entries\":" << entries << ",\"frame_bytes\":" << bytes
      << ",\"closed_size\":" << g_closed_size << ",\"closed_interval\":" << g_closed_interval
      << ",\"repeated\":" << g_repeated << ",\"loss_to_unicast\":" << g_to_unicast
      << ",\"loss_to_multicast\":" << g_to_multicast << ",\"loss_unicast_packets\":" << g_loss_unicast
      << ",\"loss_blackouts\":" << g_blackouts << ",\"loss_held_airtime\":" << g_held
      << ",\"loss_shed\":" << g_shed << ",\"loss_start_unicast\":" << g_start_unicast
      << ",\"loss_start_held\":" << g_start_held << ",\"loss_start_cleared\":" << g_start_cleared
      << ",\"loss_start_trials\":" << g_trials << ",\"loss_trial_packets\":" << g_trial_pkts
      << ",\"rule_unicast_frames\":" << g_rule_frames
      << ",\"rule_unicast_packets\":" << g_rule_packets
      << ",\"rule_copies_priced_out\":" << g_rule_priced << ",\"guards\":" << g_guards
      << ",\"stations\":[";
    bool first = true;
    for (uint32_t i = 0; i < g_rx_frames.size(); i++)
    {
        if (g_rx_frames[i] == 0)
        {
            continue;
        }
        o << (first ? "" : ",") << "{\"node\":\"" << g_nodes[i].name
          << "\",\"frames\":" << g_rx_frames[i] << ",\"own\":" << g_rx_own[i]
          << ",\"recovered\":" << g_rx_repeat[i] << ",\"duplicates\":" << g_rx_dup[i]
          << ",\"copies\":" << g_rx_copies[i] << ",\"max_gap\":" << g_rx_gap[i]
          << ",\"max_gap_at_us\":" << g_rx_gap_at_us[i] << "}";
        first = false;
    }
    o << "]}\n";
    FILE* out = std::fopen(g_mux.report.c_str(), "w");
    if (!out)
    {
        std::fprintf(stderr, "airpack-ns3-air: cannot write %s\n", g_mux.report.c_str());
        std::exit(2);
    }
    std::fputs(o.str().c_str(), out);
    std::fclose(out);
}

} // namespace air
