#!/usr/bin/env python3
"""The expected loss-scale sequences of tests/test_loss_scaler.cpp, from DeepSpeed's rules.

A transcription of DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py,
DeepSpeed 0.19.6, commit edaa7221) without torch or logging. A sequence is a string: 'O' an
overflowing step, '.' a clean one. Run it to regenerate the tables:
python3 tests/parity/ds_loss_scaler.py
"""


class DynamicLossScaler:
    def __init__(self, init_scale, scale_window, min_scale, delayed_shift, consecutive_hysteresis,
                 raise_error_at_min_scale=True):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = 2.0
        self.scale_window = scale_window
        self.min_scale = min_scale
        self.delayed_shift = delayed_shift
        self.cur_hysteresis = delayed_shift
        self.consecutive_hysteresis = consecutive_hysteresis
        self.raise_error_at_min_scale = raise_error_at_min_scale

    def update_scale(self, overflow):
        if overflow:
            if self.delayed_shift == 1 or self.cur_hysteresis == 1:
                if (self.cur_scale == self.min_scale) and self.raise_error_at_min_scale:
                    raise Exception("Current loss scale already at minimum - cannot decrease scale anymore.")
                self.cur_scale = max(self.cur_scale / self.scale_factor, self.min_scale)
            else:
                self.cur_hysteresis -= 1
            self.last_overflow_iter = self.cur_iter
        else:
            if self.consecutive_hysteresis:
                self.cur_hysteresis = self.delayed_shift
            stable_interval = (self.cur_iter - self.last_overflow_iter) - 1
            if (stable_interval > 0) and (stable_interval % self.scale_window == 0):
                if not self.consecutive_hysteresis:
                    self.cur_hysteresis = self.delayed_shift
                self.cur_scale *= self.scale_factor
        self.cur_iter += 1


def replay(name, seq, power, window, min_scale, hysteresis, consecutive, raise_at_min=True):
    s = DynamicLossScaler(2**power, window, min_scale, hysteresis, consecutive, raise_at_min)
    scales, hyst = [], []
    for c in seq:
        try:
            s.update_scale(c == 'O')
        except Exception:
            scales.append(-1.0)  # DeepSpeed raised here
            hyst.append(s.cur_hysteresis)
            break
        scales.append(float(s.cur_scale))
        hyst.append(s.cur_hysteresis)
    print(f"// {name}: power {power}, window {window}, min {min_scale}, hysteresis {hysteresis}, "
          f"consecutive {consecutive}, raise_at_min {raise_at_min}")
    print(f'const char k{name}Seq[] = "{seq}";')
    print(f"const double k{name}Scale[] = {{" + ", ".join(repr(x) for x in scales) + "};")
    print(f"const int k{name}Hyst[] = {{" + ", ".join(str(x) for x in hyst) + "};")


if __name__ == "__main__":
    mixed = "...O.O..O....O.OO..OOO......O..O.O.O.O"
    replay("Hysteresis", mixed, 8, 3, 1, 2, False)
    replay("Consecutive", mixed, 8, 3, 1, 2, True)
    replay("NoHysteresis", mixed, 8, 3, 1, 1, False)
    replay("Deep", "OOO.OO....OOO.O..........OOOOOO", 9, 4, 2, 3, False)
    replay("DeepConsecutive", "OOO.OO....OOO.O..........OOOOOO", 9, 4, 2, 3, True)
    replay("Window", "." * 12 + "O" + "." * 9, 0, 3, 1, 2, False)
    replay("FloorNoRaise", "OOOOOOOO.OO", 2, 1000, 1, 1, False, False)
    replay("FloorRaise", "OOOOOOOO", 2, 1000, 1, 2, False, True)
