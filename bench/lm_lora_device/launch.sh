#!/bin/bash
# Run on the device machine from the repository root (call 3): join the model, check it, start seeds 0-9 of the
# LoRA measurement as separate process sessions (they outlive this call), then watch them until WATCH_S.
set -u
WATCH_S=${WATCH_S:-560}
T0=$(date +%s)
cd /tmp/lora || exit 1
cat part.0 part.1 part.2 > model.gguf.xz
echo "xz sha256 $(sha256sum model.gguf.xz | cut -c1-64) (want a0481d6664368815cb5d836fe5c865e5b9555f0cd1f2757f363643978f85bfde)"
xz -d -T0 -c model.gguf.xz > SmolLM2-135M-Instruct.Q4_1.gguf || exit 1
GOT=$(sha256sum SmolLM2-135M-Instruct.Q4_1.gguf | cut -c1-64)
echo "gguf sha256 $GOT"
[ "$GOT" = b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 ] || { echo "model sha256 mismatch"; exit 1; }
rm -f model.gguf.xz
cd "$OLDPWD"
rm -rf /tmp/code && mkdir -p /tmp/code /tmp/runs /tmp/cache && cp -r llm_policy_gen pyproject.toml /tmp/code/
( cd /tmp/code && find llm_policy_gen -name '*.py' | sort | xargs sha256sum | sha256sum | cut -c1-64 ) > /tmp/runs/code_sha
echo "code tree sha $(cat /tmp/runs/code_sha)"
cd /tmp/code
for S in 0 1 2 3 4 5 6 7 8 9; do
  USE_HUB_KERNELS=NO OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/code setsid nohup python3 -m llm_policy_gen train \
    --env FrozenLake-v1.deterministic --mode lm-policy --lm-model /tmp/lora/SmolLM2-135M-Instruct.Q4_1.gguf \
    --lm-head scores --lora 8 --lm-features onehot --device cuda --seed $S --iterations 80 --max-steps 10240 \
    --lm-n-steps 128 --lm-batch-size 64 --lm-epochs 4 --select none \
    --logs-dir /tmp/runs --run-id lora8_s$S --lm-cache /tmp/cache/s$S --no-plots --no-progress \
    > /tmp/runs/s$S.log 2>&1 < /dev/null &
done
sleep 5
bash /tmp/lora/watch.sh $((WATCH_S - $(date +%s) + T0))
