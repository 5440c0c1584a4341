"""The network: an LSTM over the window plus a head per lead and level, and its loss.

Direct multi-horizon: for each lead a P50 plus non-negative (softplus) steps down to
the lower levels and up to the upper ones, so quantiles never cross.  A linear path
from the window and the static features to the P50 runs beside the LSTM head.
"""
from __future__ import annotations

from forecaster.lstm.config import LSTMConfig
from forecaster.lstm.features import N_SEQ, n_static


def torch_module():
    """torch, imported on first use (importing warmcast must not load it)."""
    import torch

    return torch


def make_net(cfg: LSTMConfig):
    torch = torch_module()
    nn = torch.nn

    class QuantileLSTM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            H, Q = cfg.horizon, len(cfg.levels)
            S = n_static(H)
            self.lstm = nn.LSTM(N_SEQ, cfg.hidden, batch_first=True)
            self.head = nn.Sequential(
                nn.Linear(cfg.hidden + S, cfg.head_hidden), nn.GELU(), nn.Dropout(cfg.dropout),
                nn.Linear(cfg.head_hidden, H * Q),
            )
            self.skip = nn.Linear(S + cfg.window, H)  # linear path: window + seasonal profile -> P50
            self.mid = list(cfg.levels).index(0.5)
            self.H, self.Q = H, Q
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, seq, static):
            if cfg.recurrent:
                _, (h, _) = self.lstm(seq)
                state = h[-1]
            else:  # the ablation: what the head and the linear path do without the recurrent part
                state = seq.new_zeros((seq.shape[0], cfg.hidden))
            z = torch.cat([self.drop(state), static], dim=1)
            raw = self.head(z).view(-1, self.H, self.Q)
            base = raw[..., self.mid] + self.skip(torch.cat([seq[..., 0], static], dim=1))
            outs = [None] * self.Q
            outs[self.mid] = base
            q = base
            for i in range(self.mid - 1, -1, -1):  # down from P50: cumulative softplus steps
                q = q - nn.functional.softplus(raw[..., i]) - 1e-4
                outs[i] = q
            q = base
            for i in range(self.mid + 1, self.Q):
                q = q + nn.functional.softplus(raw[..., i]) + 1e-4
                outs[i] = q
            return torch.stack(outs, dim=-1)  # (B, H, Q)

    return QuantileLSTM()


def pinball_loss(pred, target, levels):
    """Mean pinball loss over non-NaN targets; pred (B,H,Q), target (B,H)."""
    torch = torch_module()
    q = torch.as_tensor(levels, dtype=pred.dtype)
    mask = torch.isfinite(target)
    t = torch.nan_to_num(target)[..., None]
    d = t - pred
    loss = torch.maximum(q * d, (q - 1) * d).mean(-1)
    return (loss * mask).sum() / mask.sum().clamp(min=1)
