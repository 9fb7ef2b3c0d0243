/**
 * The Tinker request bodies that may arrive by the megabyte, with how each is prepared for its service
 * (http/large-body.ts): sampling's prompt, and forward / forward_backward in JSON (newer SDKs send protobuf).
 * The worker thread imports this module to find them by name.
 */
import { bodyTask } from '../http/large-body.ts';
import {
  ForwardBackwardJsonBody,
  ForwardJsonBody,
  forwardBackwardFromJson,
  prepareSample,
  SampleBody,
} from './schemas.ts';

const HERE = import.meta.url;

export const SAMPLE_BODY = bodyTask(HERE, 'SAMPLE_BODY', SampleBody, prepareSample);
export const FORWARD_BODY = bodyTask(HERE, 'FORWARD_BODY', ForwardJsonBody, (body) =>
  forwardBackwardFromJson(body.model_id, body.seq_id, body.forward_input, true),
);
export const FORWARD_BACKWARD_BODY = bodyTask(HERE, 'FORWARD_BACKWARD_BODY', ForwardBackwardJsonBody, (body) =>
  forwardBackwardFromJson(body.model_id, body.seq_id, body.forward_backward_input, false),
);
