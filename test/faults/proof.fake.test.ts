import { fakeTarget } from '../helpers/kube-target.ts';
import { proofScenarios } from './proof-scenarios.ts';

proofScenarios('fake API server', () => fakeTarget());
