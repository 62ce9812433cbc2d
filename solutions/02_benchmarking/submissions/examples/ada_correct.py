# Events on a GPU, perf_counter on the CPU, warm-up untimed; the traffic counted right: full marks.
#%% benchmark from-solution
#%% gelu_traffic from-solution
