"""Where settings come from: defaults < config file < TFDIST_OPT_* env < keywords."""

import tfdist_opt

env = {"TFDIST_OPT_ALL_REDUCE": "ring"}  # os.environ when not given
config = tfdist_opt.StrategyConfig.load("cpu_test", environ=env, all_reduce="reduce_to_one")
print(config.mode, config.cpu_replicas, config.all_reduce)  # keyword beat env

# The decision opt_strategy() would take here, without building anything.
plan = tfdist_opt.plan_strategy(config, tfdist_opt.detect_topology())
print(plan.kind, "over", plan.devices, "because", "; ".join(plan.reasons))

try:
    tfdist_opt.StrategyConfig(num_packs=0)
except ValueError as e:
    print(e)  # Invalid value for `num_packs`: expected a positive int. Received: ...
