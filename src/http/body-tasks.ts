/**
 * The bodies of this folder's routes that may arrive by the megabyte, with how each is prepared for its service
 * (large-body.ts): a trajectory log and an RL job. The worker thread imports this module to find them by name.
 */
import { LogBody } from '../api/models.ts';
import { RlJobBody } from '../api/training-jobs.ts';
import { prepareRlJob, rlJobTarget } from '../training/rl-submission.ts';
import { prepareLog } from '../trajectories/rows.ts';
import { bodyTask } from './large-body.ts';

const HERE = import.meta.url;

export const LOG_BODY = bodyTask(HERE, 'LOG_BODY', LogBody, prepareLog);
/** Read twice for a large body (both times on the worker thread): what it names, then the rest once that is known. */
export const RL_JOB_TARGET = bodyTask(HERE, 'RL_JOB_TARGET', RlJobBody, rlJobTarget);
export const RL_JOB_BODY = bodyTask(HERE, 'RL_JOB_BODY', RlJobBody, prepareRlJob);
