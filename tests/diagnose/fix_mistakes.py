"""Fixes of notebook 16's scripts as learners write them, each an edit of the broken script: (script, the text
replaced, its replacement). Right ones in forms other than the reference's, and wrong ones: a hurried learner's
shortcut, a symptom hidden, a tutorial's habit. The teacher's (they are near-answers): the student edition leaves
this file out."""

RIGHT = {
    # a NaN on any rank makes the summed loss NaN on every rank
    "a-summed-loss": ("run_a.py", "            if not torch.isfinite(loss):\n",
                      "            summed = loss.detach().clone()\n            dist.all_reduce(summed)\n"
                      "            if not torch.isfinite(summed):\n"),
    # each step's batch cut in contiguous halves, not interleaved: the same blocks in each step
    "b-contiguous": ("run_b.py", "        blocks = pack(docs[rank::world], BLOCK + 1)\n",
                     "        blocks = pack(docs, BLOCK + 1)\n        steps = len(blocks) // GLOBAL_BATCH\n"
                     "        blocks = blocks[:steps * GLOBAL_BATCH].view(steps, GLOBAL_BATCH, -1)\n"
                     "        blocks = blocks[:, rank * (GLOBAL_BATCH // world):(rank + 1) * (GLOBAL_BATCH // world)]\n"
                     "        blocks = blocks.reshape(-1, BLOCK + 1)\n"),
    # every rank's loss gathered as Python floats, averaged the same way on each
    "c-gathered": ("run_c.py", "            val_loss = validation_loss(model, my_val)\n",
                   "            losses = [0.0] * world\n"
                   "            dist.all_gather_object(losses, validation_loss(model, my_val))\n"
                   "            val_loss = sum(losses) / world\n"),
}

WRONG = {
    # the step the run showed, skipped on every rank: right on this data only
    "a-that-step": ("run_a.py", "            if not torch.isfinite(loss):\n", "            if step == 8:\n",
                    "with SEED=8 (other data), but its checkpoint's loss is nan"),
    # the NaN hidden: a zero loss instead, whose gradient is NaN all the same
    "a-nan-to-num": ("run_a.py", "                skipped += 1\n                continue\n",
                     "                skipped += 1\n                loss = torch.nan_to_num(loss)\n",
                     "on its own data, but its checkpoint's loss is nan"),
    # the collective that failed wrapped in try/except: gloo aborts the process, nothing is raised
    "a-try-except": ("run_a.py", "                dist.all_reduce(logged)\n",
                     "                try:\n                    dist.all_reduce(logged)\n"
                     "                except RuntimeError:\n                    pass\n", "your fixed/run_a.py on 2 ranks failed: all_reduce received a message of another size"),
    # a longer collective timeout: the ranks' calls still differ
    "a-longer-timeout": ("run_a.py", "SEED = int(", "os.environ['MINITRAIN_COLLECTIVE_TIMEOUT'] = '600'\nSEED = int(",
                         "your fixed/run_a.py on 2 ranks failed: all_reduce received a message of another size"),
    # a GPU tutorial's habit: a barrier after each step "to keep the ranks in sync"
    "a-barrier": ("run_a.py", "            optimizer.step()\n", "            optimizer.step()\n            dist.barrier()\n",
                  "your fixed/run_a.py on 2 ranks failed: all_reduce received a message of another size"),
    # the update deleted: the loss never reaches the target, so no rank leaves early, and nothing is learnt
    "c-no-update": ("run_c.py", "            optimizer.step()\n", "",
                    "on its own data, but its checkpoint is at step 4; the script's in one process is at step 28"),
    # every rank stops at the fewest batches: no hang, but each still packs its own documents
    "b-fewest": ("run_b.py", "        steps_per_epoch = len(blocks) // per_rank\n",
                 "        fewest = torch.tensor([len(blocks) // per_rank])\n"
                 "        dist.all_reduce(fewest, op=dist.ReduceOp.MIN)\n        steps_per_epoch = int(fewest)\n",
                 "on its own data, but its checkpoint is at step 28; the script's in one process is at step 30"),
    # rank 0 decides for everyone, on its half of the validation set
    "c-rank-0-decides": ("run_c.py", "            if val_loss < TARGET:\n",
                         "            stop = torch.tensor([float(val_loss < TARGET)])\n"
                         "            dist.broadcast(stop, src=0)\n            if stop.item():\n",
                         "on its own data, but its checkpoint is at step 32; the script's in one process is at step 28"),
    # the barrier the rank that left waits in, removed: the other rank's next all-reduce has no peer
    "c-no-barrier": ("run_c.py", "        dist.barrier()\n\n\nif", "\n\nif", "your fixed/run_c.py on 2 ranks failed"),
    # the step one process stops at, written in: right on this data only
    "c-that-step": ("run_c.py", "            if val_loss < TARGET:\n", "            if step == 27:\n",
                    "on its own data, but its checkpoint's loss is"),
}
