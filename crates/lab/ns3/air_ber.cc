// airpack-ns3-air: per-link bit errors (issue 11 point 5). A link given a
// bit error rate BER (`ber I J BER`: frames transmitted by node I and
// received by node J) loses each frame of n bits with probability
// 1 - (1 - BER)^n, independently of every other frame, on top of whatever
// ns-3's own reception model decides (signal, noise, interference).
//
// Implemented as a post-reception error model on the receiving node's PHY
// (WifiPhy::SetPostReceptionErrorModel): ns-3 hands it every MPDU that
// passed its own reception check, header and FCS included, so n = 8 x the
// MPDU's bytes (24 MAC header + 8 LLC/SNAP + IP packet + 4 FCS for a non-QoS
// data frame). Only data and management frames (which name their
// transmitter, address 2) are affected: unicast and group-addressed alike,
// so a lost unicast frame is retried by the MAC and a lost multicast frame
// (a hello, a routing message) is simply lost. Control frames (ACK, RTS,
// CTS, block ACK) carry no transmitter address an error model can match
// and are never corrupted by it; they are 14-20 bytes, so at BER 1e-4 they
// would lose about 1-2 % besides (not modelled). Inside an A-MPDU each MPDU
// is checked on its own.
//
// Must not touch: the scenario (air.cc builds it and calls SetupBer once
// the Wi-Fi devices exist) or files (air_obs.cc writes the counters).

#include "air.h"

#include <cmath>
#include <ctime>
#include <unistd.h>

namespace air
{

std::vector<BerCfg> g_ber;

namespace
{

// One per receiving node that has at least one lossy incoming link.
class LinkBerModel : public ErrorModel
{
  public:
    LinkBerModel(uint32_t rx, std::vector<double> ber_from, uint32_t stream)
        : m_rx(rx),
          m_ber(std::move(ber_from)),
          m_rng(CreateObject<UniformRandomVariable>())
    {
        m_rng->SetStream(stream);
    }

  private:
    bool DoCorrupt(Ptr<Packet> p) override
    {
        WifiMacHeader h;
        if (p->PeekHeader(h) == 0 || !(h.IsData() || h.IsMgt()))
        {
            return false; // control frames name no transmitter
        }
        uint32_t j = NodeOfAirMac(h.GetAddr2());
        if (j >= m_ber.size() || m_ber[j] <= 0)
        {
            return false;
        }
        double ok = std::exp(8.0 * p->GetSize() * std::log1p(-m_ber[j]));
        bool lost = m_rng->GetValue() >= ok;
        Peer& peer = g_cnt[m_rx].peers[j];
        peer.ber_checked++;
        if (lost)
        {
            peer.ber_lost++;
            g_cnt[m_rx].ber_lost++;
        }
        return lost;
    }

    void DoReset() override
    {
    }

    uint32_t m_rx;
    std::vector<double> m_ber; // by transmitting node
    Ptr<UniformRandomVariable> m_rng;
};

} // namespace

void SetupBer(bool tap)
{
    const uint32_t n = g_wifi.size();
    // Pure simulation: a fixed stream per receiving node (the same RngRun
    // loses the same draws). Emulation (taps) is never repeatable anyway,
    // and a fixed stream would give every point of a search the same
    // sequence of losses while only hellos cross the air before the calls
    // (the daemons' link estimates would start from the same luck in every
    // point): there the streams are salted with the time and the pid.
    uint64_t salt = tap ? (uint64_t(std::time(nullptr)) ^ (uint64_t(getpid()) << 20)) & 0xffffffff : 0;
    for (uint32_t rx = 0; rx < n; rx++)
    {
        std::vector<double> from(n, 0.0);
        bool any = false;
        for (auto& b : g_ber)
        {
            if (b.rx == rx)
            {
                from[b.tx] = b.ber;
                any = any || b.ber > 0;
            }
        }
        if (any)
        {
            Ptr<LinkBerModel> m = Create<LinkBerModel>(rx, from, 1000 + rx + 1024 * salt);
            g_wifi[rx]->GetPhy()->SetPostReceptionErrorModel(m);
        }
    }
}

} // namespace air
